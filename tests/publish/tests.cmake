# Publisher tests (issue 5). Sources are relative to tests/.
kvp_add_test(publish_core publish/test_publisher_core.c publish/pubfix.c
  LABELS publish nats TIMEOUT 60)
kvp_add_test(publish_faults publish/test_publisher_faults.c publish/pubfix.c
  LABELS publish nats TIMEOUT 90)
kvp_add_test(publish_blockmgr publish/test_publisher_blockmgr.c publish/pubfix.c
  LABELS publish nats block TIMEOUT 90)
kvp_add_test(publish_queue publish/test_queue.c LABELS publish)
