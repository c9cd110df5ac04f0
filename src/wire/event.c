/* Names of the event vocabulary declared in include/kvplane/event.h (tiers
 * and event types), beside nothing else so a reader of event.h finds them. */
#include "kvplane/event.h"

const char *kvp_tier_name(int tier) {
  static const char *const names[] = {"ALL", "G1", "G2", "G3", "G4"};
  return tier >= 0 && tier <= KVP_TIER_MAX ? names[tier] : "?";
}

const char *kvp_event_type_name(int type) {
  static const char *const names[] = {"?", "stored", "removed", "accessed", "cleared", "snapshot"};
  return type >= KVP_EV_STORED && type <= KVP_EV_SNAPSHOT ? names[type] : "?";
}
