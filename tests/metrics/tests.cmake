kvp_add_test(metrics metrics/test_metrics.c LABELS metrics)
