/* Waking the publisher's loop thread from any other thread: producers
 * (publisher.c) and nats.c's callbacks (transport.c). uv_async_send is the
 * only libuv call made off the loop thread (STYLE.md). This file calls
 * nothing else of the publisher, so the calls between the publisher's
 * files go one way: publisher.c -> loop.c -> transport.c, and each of them
 * -> wake.c. */
#include "publish/pub.h"

void kvp__pub_wake(kvp_publisher_t *pub) {
  /* nats.c threads may still call back while the loop stops. */
  pthread_mutex_lock(&pub->wmu);
  if (pub->wake_ok)
    uv_async_send(&pub->async);
  pthread_mutex_unlock(&pub->wmu);
}

void kvp__pub_maybe_wake(kvp_publisher_t *pub, size_t before) {
  if (before == KVP__PUBQ_HALF || pub->wake_at == 0 ||
      (before == 0 ? !atomic_load(&pub->armed) : before + 1 == pub->wake_at))
    kvp__pub_wake(pub);
}
