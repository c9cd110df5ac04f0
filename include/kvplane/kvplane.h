/* kvplane: KV-cache block manager, event plane and storage advisor.
 * Umbrella header: includes every public header. */
#ifndef KVPLANE_KVPLANE_H
#define KVPLANE_KVPLANE_H

#include "kvplane/advisor.h"
#include "kvplane/blockmgr.h"
#include "kvplane/event.h"
#include "kvplane/hash.h"
#include "kvplane/publisher.h"
#include "kvplane/status.h"
#include "kvplane/wire.h"

#endif
