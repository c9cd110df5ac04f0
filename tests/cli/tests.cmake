# The kvplane CLI (tools/kvplane.c over src/cli). Sources are relative to tests/.
kvp_add_test(cli cli/test_cli.c advisor/advfix.c advisor/testworker.c LABELS nats TIMEOUT 120)
