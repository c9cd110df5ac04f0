/* kvplane: KV-cache block manager, event plane and storage advisor.
 * Umbrella header: includes every public header, which is all of
 * libkvplane's API. The daemons' libraries (advisor, relay, index, store,
 * tiering) are not part of libkvplane and their headers are not installed;
 * their wire contracts are (the .proto, the query formats in client.h, the
 * SQL schema in docs/sql.md). */
#ifndef KVPLANE_KVPLANE_H
#define KVPLANE_KVPLANE_H

#include "kvplane/blockmgr.h"
#include "kvplane/blockpool.h"
#include "kvplane/client.h"
#include "kvplane/event.h"
#include "kvplane/hash.h"
#include "kvplane/layout.h"
#include "kvplane/nats.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/storage.h"
#include "kvplane/subjects.h"
#include "kvplane/volume.h"
#include "kvplane/volume_plugin.h"
#include "kvplane/wire.h"

#endif
