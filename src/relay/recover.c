/* One endpoint's message sequence (state.h): a live message's sequence
 * number against the last one, a gap recovered through the engine's replay
 * socket (its three reply layouts), a restart or an unrecoverable gap
 * cleared. relay/relay.h describes the protocol. */
#include <inttypes.h>
#include <stdio.h>
#include <zmq.h>

#include "kvplane/status.h"

#include "relay/state.h"

static int be64(const void *p, size_t n, int64_t *seq) {
  if (n != 8)
    return -1;
  const uint8_t *b = p;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v = (v << 8) | b[i];
  *seq = (int64_t)v;
  return 0;
}

/* Reads one multipart message into parts (up to max, sizes in n); returns
 * the frame count (beyond max frames are read and dropped), or -1. */
static int recv_parts(void *sock, zmq_msg_t *parts, int max, int flags) {
  int count = 0, more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, count == 0 ? flags : 0) < 0) {
      zmq_msg_close(&m);
      for (int i = 0; i < count && i < max; i++)
        zmq_msg_close(&parts[i]);
      return -1;
    }
    more = zmq_msg_more(&m);
    if (count < max)
      parts[count] = m;
    else
      zmq_msg_close(&m);
    count++;
  }
  return count;
}

static void close_parts(zmq_msg_t *parts, int n, int max) {
  for (int i = 0; i < n && i < max; i++)
    zmq_msg_close(&parts[i]);
}

/* Decodes a payload with dec; a payload that does not decode is counted and
 * logged (rate-limited) and 0 returned, else 1 with *d filled. */
static int decode(kvp__relay_ep_t *ep, kvp_relay_decoder_t *dec, int64_t seq, const void *p,
                  size_t len, kvp_relay_decoded_t *d) {
  int rc = kvp__relay_decode(dec, p, len, d);
  if (rc == 0)
    return 1;
  uint64_t n = CNT(ep, decode_errors) + 1;
  if (kvp__relay_worth_logging(n))
    LOG(ep, "payload of %zu bytes with sequence %" PRId64 " skipped: %s (%" PRIu64 " so far)", len,
        seq, kvp_strerror(rc), n);
  return 0;
}

/* How a replay treats a buffer that begins after the sequence asked for. */
enum {
  REPLAY_EXACT,   /* a gap: the reply must begin at start */
  REPLAY_LATE,    /* the relay joined late: what the buffer no longer holds came before
                   * the relay and is not counted lost (a stream may start at any
                   * number, TensorRT-LLM's at a timestamp) */
  REPLAY_RESTART, /* an engine or relay restart: what the buffer no longer holds is
                   * counted lost and logged */
};

/* Asks the replay socket for start..; applies what comes back up to (not
 * including) until, in order. Except for REPLAY_EXACT the buffer may begin
 * after start (see above); with REPLAY_EXACT the reply must begin at start.
 * Replies before the next wanted sequence are skipped without being
 * decoded. Returns 0 when every sequence up to until-1 that the buffer
 * could hold arrived, -1 otherwise. */
static int replay(kvp_relay_t *r, kvp__relay_ep_t *ep, int64_t start, int64_t until, int mode) {
  int ok = -1, linger = 0, tmo = (int)r->replay_timeout_ms, first = 1;
  int64_t next = start;
  void *d = zmq_socket(r->zctx, ZMQ_DEALER);
  if (!d)
    return -1;
  CNT(ep, replays);
  zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(d, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
  zmq_setsockopt(d, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
  if (zmq_connect(d, ep->replay) != 0)
    goto done;
  uint8_t be[8];
  for (int i = 0; i < 8; i++)
    be[i] = (uint8_t)((uint64_t)start >> (56 - 8 * i));
  if (zmq_send(d, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(d, be, 8, 0) < 0)
    goto done;
  for (;;) {
    zmq_msg_t p[4];
    int n = recv_parts(d, p, 4, 0);
    if (n < 0) {
      LOG(ep, "replay from %" PRId64 ": no answer in %u ms", start, r->replay_timeout_ms);
      goto done;
    }
    int si; /* index of the sequence frame */
    if (n == 4 && zmq_msg_size(&p[0]) == 0)
      si = 2;
    else if (n == 3 && zmq_msg_size(&p[0]) == 0)
      si = 1;
    else if (n == 2)
      si = 0;
    else {
      CNT(ep, decode_errors);
      close_parts(p, n, 4);
      continue;
    }
    int64_t seq;
    if (be64(zmq_msg_data(&p[si]), zmq_msg_size(&p[si]), &seq) != 0) {
      CNT(ep, decode_errors);
      close_parts(p, n, 4);
      continue;
    }
    if (seq == -1) {
      close_parts(p, n, 4);
      break;
    }
    if (first && mode != REPLAY_EXACT && seq > next && seq < until) {
      /* A resumed relay misses only what came after it last published. */
      int64_t from = ep->silent_until > next ? ep->silent_until : next;
      if (mode == REPLAY_RESTART && seq > from) {
        CNTN(ep, lost, (uint64_t)(seq - from));
        LOG(ep, "replay buffer begins at %" PRId64 ": sequences %" PRId64 "..%" PRId64 " are gone",
            seq, from, seq - 1);
      } else if (mode == REPLAY_LATE) {
        LOG(ep, "replay buffer begins at %" PRId64 ": the stream before it is not replayable", seq);
      }
      if (mode == REPLAY_RESTART && ep->silent_until > 0 && seq <= ep->silent_until) {
        /* Resuming from a map older than the buffer (a map file lost,
         * unreadable, or saved long before): what was published before
         * seq cannot be mapped again, so its later removals could not be
         * told to the advisor. Cleared, and the buffer published again. */
        CNTN(ep, lost, (uint64_t)(seq - next));
        LOG(ep,
            "replay buffer begins at %" PRId64 ": the map as of %" PRId64
            " cannot be brought up to date",
            seq, next - 1);
        kvp__relay_clear(ep, "the relay's map is older than the engine's replay buffer");
        ep->silent_until = 0;
      }
      next = seq;
      if (ep->silent_until > 0 && seq > ep->silent_until)
        kvp__relay_clear(ep, "what came after the last sequence published before the relay "
                             "restarted is beyond the engine's replay buffer");
    }
    first = 0;
    if (seq == next && seq < until) {
      kvp_relay_decoded_t dd;
      CNT(ep, replay_msgs);
      CNT(ep, msgs);
      /* Replayed, the same bytes would not decode either: that sequence is lost. */
      if (decode(ep, r->rdec, seq, zmq_msg_data(&p[si + 1]), zmq_msg_size(&p[si + 1]), &dd)) {
        ep->silent = seq < ep->silent_until;
        kvp__relay_apply(r, ep, &dd);
        ep->silent = 0;
      } else
        CNT(ep, lost);
      next++;
      ep->last_seq = seq;
    } else {
      CNT(ep, skip_dup); /* outside the range asked for, or out of order */
    }
    close_parts(p, n, 4);
  }
  ok = next >= until ? 0 : -1;
  if (ok)
    LOG(ep, "replay from %" PRId64 " ended at %" PRId64 ", wanted up to %" PRId64, start, next,
        until - 1);
done:
  zmq_close(d);
  return ok;
}

/* The earliest sequence worth asking the replay socket for when the first
 * one seen is seq: no engine buffers more than join_window messages. */
static int64_t window_start(const kvp_relay_t *r, int64_t seq) {
  return seq > (int64_t)r->join_window ? seq - (int64_t)r->join_window : 0;
}

void kvp__relay_on_message(kvp_relay_t *r, kvp__relay_ep_t *ep) {
  zmq_msg_t p[3];
  int n = recv_parts(ep->sub, p, 3, ZMQ_DONTWAIT);
  int64_t seq;
  if (n < 0)
    return;
  if (n != 3 || be64(zmq_msg_data(&p[1]), zmq_msg_size(&p[1]), &seq) != 0) {
    uint64_t k = CNT(ep, decode_errors) + 1;
    if (kvp__relay_worth_logging(k))
      LOG(ep, "message of %d frames skipped (want topic, 8-byte seq, payload; %" PRIu64 " so far)",
          n, k);
    goto out;
  }
  CNT(ep, msgs);
  kvp_relay_decoded_t d;
  if (!decode(ep, r->dec, seq, zmq_msg_data(&p[2]), zmq_msg_size(&p[2]), &d)) {
    /* Decode first: the sequence of a payload that did not decode is not
     * trusted to clear or replay. In sequence, it is one lost sequence
     * (replay would bring the same bytes back); otherwise it is ignored and
     * the state does not move. */
    if (ep->last_seq >= 0 && seq == ep->last_seq + 1) {
      CNT(ep, lost);
      ep->last_seq = seq;
      __atomic_store_n(&ep->st.last_seq, seq, __ATOMIC_RELAXED);
    }
    goto out;
  }
  if (d.nevents == 0 && d.errors == 0 && ep->last_seq >= 0 && seq == ep->last_seq) {
    /* An idle batch that repeats the last sequence announces nothing: it
     * is not a restarted publisher (which would clear and replay). */
    CNT(ep, heartbeats);
    goto out;
  }
  if (ep->last_seq < 0 && ep->resume_seq >= 0) {
    /* Restarted relay: the previous run published up to resume_seq. */
    int64_t done = ep->resume_seq;
    ep->resume_seq = -1;
    if (seq <= done) {
      CNT(ep, restarts);
      kvp__relay_clear(ep, "engine restarted while the relay was down (sequence went back)");
      if (seq > 0 && ep->replay[0] && replay(r, ep, window_start(r, seq), seq, REPLAY_RESTART) != 0)
        LOG(ep, "replay of the restarted engine's 0..%" PRId64 " incomplete", seq - 1);
    } else if (ep->replay[0] && done + 1 < window_start(r, seq)) {
      /* Further behind than any engine buffers. */
      CNTN(ep, lost, (uint64_t)(window_start(r, seq) - done - 1));
      kvp__relay_clear(ep, "the relay was down for more sequences than an engine buffers");
      if (replay(r, ep, window_start(r, seq), seq, REPLAY_LATE) != 0)
        LOG(ep, "replay before %" PRId64 " incomplete", seq);
    } else if (ep->replay[0]) {
      /* From after the saved map (else the buffer's oldest): what was
       * published brings the map up to date, without being published. */
      int64_t from = ep->map_seq + 1;
      if (from < window_start(r, seq))
        from = window_start(r, seq);
      ep->silent_until = done + 1;
      int rc = from < seq ? replay(r, ep, from, seq, REPLAY_RESTART) : 0;
      ep->silent_until = 0;
      if (rc != 0 && (ep->last_seq > done ? ep->last_seq : done) < seq - 1)
        kvp__relay_clear(ep, "replay after the relay restarted failed or too short");
    } else if (seq > done + 1) {
      CNT(ep, gaps);
      kvp__relay_clear(ep, "sequences missed while the relay was down, no replay endpoint");
    }
  } else if (ep->last_seq < 0 && seq > 0) {
    /* Joined late: the engine's replay buffer may hold what came before. */
    if (ep->replay[0]) {
      LOG(ep, "first sequence seen is %" PRId64 ": replaying what came before", seq);
      if (replay(r, ep, window_start(r, seq), seq, REPLAY_LATE) != 0)
        LOG(ep, "replay before %" PRId64 " incomplete: earlier blocks stay unknown", seq);
    }
  } else if (ep->last_seq >= 0 && seq <= ep->last_seq) {
    /* PUB/SUB never repeats a message on the live socket, and replayed
     * messages never go past the live one that asked for them: a sequence
     * that goes back is a restarted engine publisher, which counts from 0
     * again; its first messages may have been lost, its buffer has them. */
    CNT(ep, restarts);
    kvp__relay_clear(ep, "engine publisher restarted (sequence went back)");
    if (seq > 0 && ep->replay[0] && replay(r, ep, window_start(r, seq), seq, REPLAY_RESTART) != 0)
      LOG(ep, "replay of the restarted engine's 0..%" PRId64 " incomplete", seq - 1);
  } else if (ep->last_seq >= 0 && seq > ep->last_seq + 1) {
    CNT(ep, gaps);
    LOG(ep, "sequence gap: %" PRId64 " after %" PRId64, seq, ep->last_seq);
    if (!ep->replay[0] || replay(r, ep, ep->last_seq + 1, seq, REPLAY_EXACT) != 0)
      kvp__relay_clear(ep, ep->replay[0] ? "replay failed or too short" : "no replay endpoint");
  }
  kvp__relay_apply(r, ep, &d);
  ep->last_seq = seq;
  __atomic_store_n(&ep->st.last_seq, seq, __ATOMIC_RELAXED);
out:
  close_parts(p, n, 3);
}
