# Tiering (src/tier). Sources are relative to tests/.
kvp_add_test(tier_policy tier/test_tier_policy.c LABELS tier)
