/* kvplane's help texts: the usage (every command's synopsis, the shared
 * options, the exit statuses) and each command's --help. The command names
 * here are the ones tools/kvplane.c dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct cmd_help_s {
  const char *name, *synopsis, *text;
} cmds[] = {
    {"status", "kvplane status [--db PATH | -c CONFIG] [NATS options] [--json]",
     "Tier usage per tier and volume (blocks, bytes, capacity, fill) and workers up\n"
     "and down, from the database; then the advisor's live figures (ingest, index\n"
     "and database lag) when it answers over NATS within --timeout. Exit 0 even\n"
     "when the advisor does not answer (the database's figures are printed).\n"},
    {"workers", "kvplane workers [--db PATH | -c CONFIG] [--json]",
     "Every worker and dp rank: status (up, down, unknown), epoch, last event id,\n"
     "when it was last heard, and its blocks per tier.\n"},
    {"blocks", "kvplane blocks --hot|--cold [-N COUNT] [--db PATH | -c CONFIG] [--json]",
     "The COUNT (default 20) hottest blocks, by decayed hit frequency, or the\n"
     "coldest, by last access, with the tiers that hold them.\n"},
    {"migrations", "kvplane migrations [--failed] [-N COUNT] [--db PATH | -c CONFIG] [--json]",
     "The COUNT (default 20) most recently updated migrations (or only the failed\n"
     "ones, with their error): hash, from and to tier:volume, bytes, state.\n"},
    {"top", "kvplane top [--db PATH | -c CONFIG] [NATS options] [--interval DURATION] [-N COUNT]",
     "The status view refreshed every --interval (default 2s) with the advisor's\n"
     "rates (block-events/s, batches/s, migrations/s) on a terminal; when standard\n"
     "output is not a terminal, one line per interval instead (Unix time, rates,\n"
     "blocks, locations, workers up, lags), for logs and pipes. Stops after COUNT\n"
     "refreshes, or on Ctrl-C.\n"},
    {"replay",
     "kvplane replay TRACE [-s URL] [-n NS] [--workers N] [--mode core|jetstream] [--limit N]\n"
     "               [--partitions N]",
     "Replays a Mooncake-format trace (JSONL, plain or gzip; data/ has one)\n"
     "through simulated workers (block manager + publisher each, as kvplane-sim)\n"
     "publishing to NATS, with a progress bar on a terminal. --workers (default\n"
     "4), --mode (default core), --limit (first N requests; default all). Exit 2\n"
     "when publishing failed or a reused block's bytes were wrong. --partitions N:\n"
     "the servers map the event subjects to N partitions (kvplane nats-config N);\n"
     "in jetstream mode each worker publishes into its partition's stream (made\n"
     "when absent), not the unpartitioned one, which would take nothing.\n"},
    {"bench", "kvplane bench [SUITE...]",
     "Runs the benchmark suites (kvp-bench; default: all of them, several\n"
     "minutes) and prints one table: each figure with its in-run baseline and\n"
     "the ratio. kvp-bench is looked up in $KVPLANE_BENCH, next to this program,\n"
     "in ../bench of a build tree, then in PATH. `kvp-bench --list` names the\n"
     "suites.\n"},
    {"report", "kvplane report --png FILE | --svg FILE [--since DURATION] [--db PATH | -c CONFIG]",
     "Draws the tier state over time into FILE with gnuplot (gnuplot-nox): the\n"
     "bytes held per tier (MiB), the fill of each volume with a capacity (both from\n"
     "the tier_history samples the advisor takes every store.history_interval),\n"
     "and the migrations finished per interval by pair of tiers. --since keeps\n"
     "the last DURATION (e.g. 30m, 6h, 2d). Exit 4 when the database has no\n"
     "sample in that time, 5 when gnuplot is missing or fails.\n"},
    {"match", "kvplane match [NATS options] HASH... | --tokens FILE --block-size N [--lora NAME]",
     "Sends sequence hashes to the advisors and prints, per worker and tier, how\n"
     "many leading hashes are cached consecutively. Every advisor answers for its\n"
     "partitions; the answers are merged (the freshest standby per partition), and\n"
     "a partition nobody answered for within --timeout is listed in \"missing\". A HASH is "
     "0x-prefixed hex\n"
     "(0x1f), exactly 16 hex digits as logs print them (00ab12cd34ef5678), or a\n"
     "decimal as sqlite3 shows them: signed (-8446744073709551616) or unsigned\n"
     "(+1234 forces decimal for 16 digits); put -- before negative ones:\n"
     "  kvplane match -- -6917529027641081856\n"
     "With --tokens, FILE holds token ids (decimal, separated by spaces, commas\n"
     "or newlines; - for standard input), hashed in blocks of N tokens as the\n"
     "workers do (DESIGN.md, Hashing; --lora salts the seed); a trailing partial\n"
     "block is not sent.\n"},
    {"stats", "kvplane stats [NATS options]",
     "Prints the advisor's stats reply (JSON; docs/stats.md documents each field).\n"
     "With partitioned advisors (or standbys) every advisor answers: the output is\n"
     "then {\"partitions\": C, \"missing\": [...], \"replies\": [each reply]}.\n"},
    {"nats-config", "kvplane nats-config PARTITIONS",
     "Prints the nats-server configuration block that partitions the event\n"
     "subjects kvplane.ev.<ns>.<worker> into PARTITIONS partitions\n"
     "(kvplane.pev.<ns>.<p>.<worker>, p = FNV-1a of the worker mod PARTITIONS).\n"
     "Every server of the cluster carries the same block; advisors take\n"
     "[partitions] count = PARTITIONS and the partitions they own (docs/SCALE.md).\n"},
    {"partitions",
     "kvplane partitions [NATS options] ADVISOR [add P,..] [drop P,..] [tier P,..]\n"
     "                   [untier P,..] [wait]",
     "Adds partitions to, or drops them from, the running partitioned advisor whose\n"
     "[jetstream] consumer name is ADVISOR (live rebalancing, docs/SCALE.md), and\n"
     "prints its reply: owned, ready and catching_up partitions (JSON). A dropped\n"
     "partition's rows leave its database in one transaction; an added one is read\n"
     "from its stream and answered for once caught up. With wait, asks again until\n"
     "no partition is catching up (within --timeout). Without add or drop: the\n"
     "state. Change [partitions] owned in its configuration too: a restart reads it.\n"
     "tier and untier start and stop the tiering of owned partitions (the reply's\n"
     "tiering; tiering_soon: once caught up and its tiering lease is held here;\n"
     "tiering_leases: held or not, and by whom): to move tiering to a standby,\n"
     "untier on the advisor that tiers them (if it still runs: its lease is\n"
     "released), then tier on the standby. One advisor tiers a partition, the one\n"
     "holding its lease ([tiering] lease_ms); [tiering] partitions says which may.\n"},
    {"pin", "kvplane pin [NATS options] [--note TEXT] HASH... | --tokens FILE --block-size N",
     "Pins blocks in the advisor's tiering engine: a pinned block and its ancestors\n"
     "(the whole prefix) are never demoted or evicted. The pins are kept in the\n"
     "database (pins table) and survive a restart. A pin that would put a volume's\n"
     "pinned bytes over its capacity is refused (exit 3, naming the volume). HASH\n"
     "and --tokens as for match. pin, unpin, move and delete go to every advisor\n"
     "and wait for each partition's (partitioned advisors act on their own\n"
     "partitions' blocks): the reply sums theirs, names them (advisors), and exits\n"
     "3 when one refused or a partition's advisor did not answer (missing).\n"},
    {"unpin", "kvplane unpin [NATS options] HASH... | --tokens FILE --block-size N",
     "Removes pins made by kvplane pin.\n"},
    {"move", "kvplane move --tier 3|4 [--volume NAME] [NATS options] HASH... | --tokens ...",
     "Moves blocks to a volume of G3 or G4 now (the one with the most room unless\n"
     "--volume), journaled, verified and announced like the engine's own moves;\n"
     "prints how many were queued and skipped (already there, unknown, or in no\n"
     "volume). kvplane migrations shows them.\n"},
    {"delete", "kvplane delete [--tier 3|4] [NATS options] HASH... | --tokens ...",
     "Deletes blocks from the advisor's G3 and G4 volumes (or one tier), journaled\n"
     "and announced as Removed; refused (exit 3) for a pinned block. The prefix's\n"
     "continuations go too: the blocks below its last block in those tiers (not\n"
     "the siblings of its inner blocks), counted in the reply's continuations.\n"
     "A block a running round is moving is counted in in_flight: its move or\n"
     "delete is decided after that round, by where the block is then.\n"},
};

void kvp__cli_usage(FILE *f) {
  fputs("usage: kvplane <command> [options]    kvplane <command> --help\n\ncommands:\n", f);
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    fprintf(f, "  %s\n", cmds[i].synopsis);
  fputs("\n"
        "database options (status, top, workers, blocks, migrations, report):\n"
        "      --db PATH        the advisor's database (default /var/lib/kvplane/advisor.db)\n"
        "  -c, --config FILE    take the database path from this advisor configuration\n"
        "                       (status, top: its namespace and NATS options too)\n"
        "      --json           print JSON (sizes in bytes, times in Unix ms) instead of tables\n"
        "  -N, --count COUNT    rows (blocks, migrations; default 20) or refreshes (top),\n"
        "                       1..1000000\n"
        "\n"
        "NATS options (status, top, match, stats, pin, unpin, move, delete, partitions;\n"
        "replay takes -s and -n):\n"
        "  -s, --server URL     NATS server (default nats://127.0.0.1:4222)\n"
        "  -n, --ns NS          namespace (default: default; status, top: the -c\n"
        "                       configuration's, else the database's; one that is not\n"
        "                       the database's is refused, exit 1)\n"
        "  -u, --user USER      with --password\n"
        "  -p, --password PASS\n"
        "  -t, --token TOKEN\n"
        "      --creds FILE     user credentials file\n"
        "      --tls-ca FILE    CA certificates; enables TLS\n"
        "      --tls-cert FILE  client certificate chain, with --tls-key\n"
        "      --tls-key FILE   client private key\n"
        "  -w, --timeout MS     reply timeout, 1..3600000 (default 5000; status: 1000)\n"
        "  -h, --help\n"
        "      --version        print the version, git revision, build type and volume\n"
        "                       plugin ABI, and exit\n"
        "\n"
        "exit status: 0 success; 1 usage or a bad option; 2 the advisor did not answer\n"
        "(match, stats) or the connection failed; 3 the advisor answered with an error;\n"
        "4 the database is missing, is not a kvplane database, or has nothing to report;\n"
        "5 a program it runs failed (report: gnuplot; bench: kvp-bench).\n",
        f);
}

static const struct cmd_help_s *find_cmd(const char *name) {
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (strcmp(cmds[i].name, name) == 0)
      return &cmds[i];
  return NULL;
}

int kvp__cli_known(const char *name) {
  return find_cmd(name) != NULL;
}

void kvp__cli_help(const char *name, FILE *f) {
  const struct cmd_help_s *c = find_cmd(name);
  if (c != NULL)
    fprintf(f, "usage: %s\n\n%s\nkvplane --help lists the options and exit statuses.\n",
            c->synopsis, c->text);
}
