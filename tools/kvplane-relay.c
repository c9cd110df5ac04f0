/* kvplane-relay: KV events of vLLM and SGLang engines (ZMQ) republished as
 * kvplane events on NATS. A thin main over src/relay/cli.h: parse the
 * command line, expand the endpoints, serve. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "metrics/build_info.h"
#include "relay/cli.h"
#include "relay/vllmout.h"

static void usage(FILE *f) {
  fprintf(f, "usage: kvplane-relay -e URL -w ID [-r URL] [-e URL -w ID [-r URL]]... [options]\n\n"
             "Subscribes to the ZMQ KV-event publishers of vLLM or SGLang engines and\n"
             "republishes their events as kvplane events on NATS, one worker id per engine\n"
             "endpoint (subject kvplane.ev.<ns>.<worker>).\n\n"
             "  -e, --endpoint URL     engine PUB endpoint to connect (repeatable), e.g.\n"
             "                         tcp://10.0.0.5:5557\n"
             "  -r, --replay URL       replay (ROUTER) endpoint of the preceding --endpoint,\n"
             "                         e.g. tcp://10.0.0.5:5558; without one a sequence gap\n"
             "                         clears the worker's blocks\n"
             "  -w, --worker ID        worker id of the preceding --endpoint ([A-Za-z0-9_-])\n"
             "      --dp-ranks N       each endpoint is a data-parallel engine of N ranks:\n"
             "                         rank k at port + k (endpoint and replay), worker\n"
             "                         ID-dp<k> (default 1: no expansion)\n"
             "  -t, --topic STR        ZMQ topic filter (default: every topic)\n"
             "  -s, --server URL       NATS server(s), comma-separated (default\n"
             "                         nats://127.0.0.1:4222)\n"
             "      --nats NAME=VALUE  other NATS option: user, password, token, creds,\n"
             "                         tls_ca, tls_cert, tls_key, connect_timeout_ms\n"
             "  -n, --ns NAME          namespace (default \"default\")\n"
             "  -m, --mode MODE        core or jetstream (default core)\n"
             "      --partitions N     the servers map the event subjects to N partitions\n"
             "                         (kvplane nats-config N): in jetstream mode each\n"
             "                         worker's partition stream is the one looked up (and\n"
             "                         made when absent), not the unpartitioned stream\n"
             "      --media LIST       medium-to-tier overrides, NAME=G<n>,... (default table:\n"
             "                         GPU=G1, CPU/CPU_PINNED=G2, DISK/STORAGE/SHARED_STORAGE/\n"
             "                         NVME=G3, OBJECT_STORE/REMOTE/EXTERNAL=G4)\n"
             "      --block-size N     tokens per block when events omit block_size\n"
             "      --map-cap N        engine-to-kvplane hashes remembered per worker, LRU\n"
             "                         (default 1048576)\n"
             "      --hwm N            ZMQ receive high-water mark (default 100000)\n"
             "      --replay-timeout-ms N  wait for each replay reply (default 1000)\n"
             "      --join-window N    joining late at sequence n, ask the replay socket\n"
             "                         from n - N at the earliest (default 1048576)\n"
             "      --state-dir DIR    keep per endpoint the last sequence published and the\n"
             "                         publisher epoch in DIR/<worker>.state: a restarted\n"
             "                         relay resumes the epoch and replays from there\n"
             "                         (default: none, a restart starts afresh)\n"
             "      --stats-interval S print the figures every S seconds on stdout (default\n"
             "                         0: only at exit and on SIGUSR1)\n"
             "      --metrics ADDR     serve Prometheus /metrics, /healthz and /readyz over\n"
             "                         HTTP on host:port, e.g. 127.0.0.1:9465 (default: off)\n"
             "      --metrics-timeout T  a request's headers and body within T (default 10s);\n"
             "                         slower clients are cut\n"
             "      --metrics-per-client N  connections one client address may hold (default\n"
             "                         16; 0: no limit), 64 in all\n"
             "  -V, --version          print the version and build, and exit\n"
             "  -h, --help             this text\n\n"
             "With --reverse it runs the other way: kvplane workers' events from NATS\n"
             "published as vLLM KV events over ZMQ (kvplane-relay --reverse --help).\n\n"
             "Figures are one JSON line per endpoint. Blocks whose engine event carries\n"
             "token ids (and no extra_keys) get kvplane sequence hashes; others keep the\n"
             "engine's hash, counted as engine_native.\n\n"
             "exit status: 0 after SIGINT or SIGTERM, 1 for bad arguments or options (a\n"
             "malformed endpoint URL included),\n"
             "2 when NATS could not be reached or refused the credentials.\n");
}

/* The long name of option c, or NULL for an unknown one. */
static const char *long_name(const struct option *opts, int c) {
  for (size_t i = 0; opts[i].name; i++)
    if (opts[i].val == c)
      return opts[i].name;
  return NULL;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"endpoint", required_argument, 0, 'e'},
                                       {"replay", required_argument, 0, 'r'},
                                       {"worker", required_argument, 0, 'w'},
                                       {"dp-ranks", required_argument, 0, 1},
                                       {"topic", required_argument, 0, 't'},
                                       {"server", required_argument, 0, 's'},
                                       {"nats", required_argument, 0, 2},
                                       {"ns", required_argument, 0, 'n'},
                                       {"mode", required_argument, 0, 'm'},
                                       {"media", required_argument, 0, 3},
                                       {"block-size", required_argument, 0, 4},
                                       {"map-cap", required_argument, 0, 5},
                                       {"hwm", required_argument, 0, 6},
                                       {"replay-timeout-ms", required_argument, 0, 7},
                                       {"stats-interval", required_argument, 0, 8},
                                       {"metrics", required_argument, 0, 9},
                                       {"state-dir", required_argument, 0, 10},
                                       {"join-window", required_argument, 0, 11},
                                       {"partitions", required_argument, 0, 12},
                                       {"metrics-timeout", required_argument, 0, 13},
                                       {"metrics-per-client", required_argument, 0, 14},
                                       {"version", no_argument, 0, 'V'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  kvp__relay_cli_t cli;
  char err[512];
  int c, status;

  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--reverse") == 0) {
      if (strrchr(argv[0], '/') != NULL)
        argv[0] = strrchr(argv[0], '/') + 1;
      return kvp__vout_main(argc, argv);
    }
  kvp__relay_cli_init(&cli);
  kvp__log_setup(KVP_LOG_INFO, "kvplane-relay"); /* its log lines name it */
  if (strrchr(argv[0], '/') != NULL)
    argv[0] = strrchr(argv[0], '/') + 1; /* getopt's messages: the name, not the path */
  while ((c = getopt_long(argc, argv, "e:r:w:t:s:n:m:hV", opts, NULL)) != -1) {
    const char *name = long_name(opts, c);
    if (c == 'h') {
      usage(stdout);
      return 0;
    }
    if (c == 'V') {
      kvp__build_print_version(stdout, "kvplane-relay");
      return 0;
    }
    if (name == NULL) {
      usage(stderr);
      return 1;
    }
    if (kvp__relay_cli_set(&cli, name, optarg, err, sizeof err) != 0) {
      fprintf(stderr, "kvplane-relay: %s\n", err);
      return 1;
    }
  }
  if (optind != argc || cli.nargs == 0) {
    fprintf(stderr, "kvplane-relay: %s\n",
            cli.nargs ? "unexpected argument" : "--endpoint is required");
    usage(stderr);
    return 1;
  }
  if (kvp__relay_cli_finish(&cli, err, sizeof err) != 0) {
    fprintf(stderr, "kvplane-relay: %s\n", err);
    status = 1;
  } else {
    status = kvp__relay_serve(&cli);
  }
  kvp__relay_cli_cleanup(&cli);
  return status;
}
