kvp_add_test(metrics metrics/test_metrics.c LABELS metrics)
# One close of the listening socket (the wrapper of close(), see the file).
kvp_add_test(metrics_close metrics/test_metrics_close.c LABELS metrics)
target_link_options(test_metrics_close PRIVATE -Wl,--wrap=close)
# The real daemons scraped with curl, the exposition parsed with Debian's
# python3-prometheus-client (tests/metrics/test_metrics_scrape.py).
foreach(case advisor advisor_tiering advisor_tiering_lease advisor_errors relay
    relay_http_limits)
  add_test(NAME metrics_scrape.${case}
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/metrics/test_metrics_scrape.py ${case})
  set_tests_properties(metrics_scrape.${case} PROPERTIES TIMEOUT 60
    LABELS "metrics_scrape;metrics;nats" ENVIRONMENT "${KVP_TEST_ENV}")
endforeach()
add_dependencies(test_metrics kvplane-advisor kvplane-relay kvplane-sim kvplane-volume-posix)
# etc/prometheus: the alert rules use only exported metrics, and promtool
# accepts them (skipped without Debian's prometheus package).
foreach(case names promtool)
  add_test(NAME metrics_rules.${case}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/metrics/test_alert_rules.sh ${case} ${PROJECT_SOURCE_DIR})
  set_tests_properties(metrics_rules.${case} PROPERTIES TIMEOUT 60 LABELS "metrics"
    SKIP_RETURN_CODE 77)
endforeach()
