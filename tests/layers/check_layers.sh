#!/usr/bin/env bash
# The layering of src/ (DESIGN.md, "Layers and who links what"), checked on
# the sources: a folder includes only its own headers, public ones
# (kvplane/...) and those of lower layers, never a sibling's or a higher
# one's; the folders of libkvplane include no header of a library only the
# daemons link. sim (the trace replay workers, over block and publish) sits
# below cli, whose replay command runs it; cli sits above the advisor, whose
# configuration file it reads to find the database.
#   check_layers.sh SOURCE_DIR
set -euo pipefail
src=$1/src

declare -A rank=(
  [common]=0
  [hash]=1 [wire]=1 [nats]=1 [volume]=1
  [block]=2 [publish]=2 [client]=2
  [index]=3 [metrics]=3 [config]=3
  [store]=4
  [tier]=5 [sim]=5
  [advisor]=6 [relay]=6
  [cli]=7
)
# The libraries of the daemons, by the header a file would include.
daemon_headers='<(sqlite3|ini|zmq|msgpack|microhttpd|zlib)\.h>'

bad=0
for dir in "$src"/*/; do
  f=$(basename "$dir")
  if [ -z "${rank[$f]+x}" ]; then
    echo "layers: src/$f is not in the table of check_layers.sh: give it a layer" >&2
    bad=1
    continue
  fi
  while IFS=: read -r file _ inc; do
    g=${inc#*\"}
    g=${g%%/*}
    [ "$g" = "$f" ] || [ "$g" = kvplane ] && continue
    if [ -z "${rank[$g]+x}" ] || [ "${rank[$g]}" -ge "${rank[$f]}" ]; then
      echo "layers: ${file#"$1"/} includes $g/ (layer ${rank[$g]:-?}), but $f/ is layer ${rank[$f]}" >&2
      bad=1
    fi
  done < <(grep -Hn '^#include "[a-z_]*/' "$dir"*.[ch] 2>/dev/null || true)
  if [ "${rank[$f]}" -le 2 ]; then
    if grep -HnE "^#include $daemon_headers" "$dir"*.[ch] >&2; then
      echo "layers: src/$f/ is part of libkvplane and includes a daemon's library (above)" >&2
      bad=1
    fi
  fi
done
[ "$bad" = 0 ] && echo "layers: $(ls -d "$src"/*/ | wc -l) folders, every include goes down a layer"
exit "$bad"
