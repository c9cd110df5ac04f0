#!/usr/bin/env bash
# Sets everything up (missing Debian packages, configure, build) and runs the
# whole test suite with ctest, one test per case.
#   scripts/test.sh [extra cmake args...]     e.g. -DKVP_WERROR=ON
# Environment: KVP_BUILD_DIR (default: build), KVP_CTEST_ARGS (extra ctest args).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

kvp_install_packages
kvp_install_npm_tools
kvp_build -DKVP_TESTS=ON -DKVP_BENCH=ON "$@"
cd "$KVP_BUILD_DIR"
# Tests start their own nats-servers on free ports; two at a time suits a
# 2-core machine.
ctest --output-on-failure -j2 ${KVP_CTEST_ARGS:-}
