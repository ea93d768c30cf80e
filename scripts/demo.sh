#!/usr/bin/env bash
# Installs everything (scripts/bootstrap.sh), writes a demo log directory and mounts it read-only, then
# prints a few things to try. README's snippets work on it as printed, the Spark ones included: the
# mount takes no lock, so a Spark write or `kafkafs produce` can append meanwhile (the mount shows
# what they append); README's "Writes" shows a --rw mount of its own.
# Usage: scripts/demo.sh [DIR]   (default /tmp/kafkafs-demo)
#        KAFKAFS=/path/to/kafkafs scripts/demo.sh [DIR]   (that kafkafs; no bootstrap)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${KAFKAFS:-}" ]; then
  scripts/bootstrap.sh
  KAFKAFS="$PWD/.venv/bin/kafkafs"
fi
DIR="${1:-${KAFKAFS_DEMO:-/tmp/kafkafs-demo}}"
# what an earlier run (or README's snippets) left: mounts, a stream's checkpoint, exports
for m in "$DIR/mnt" "$DIR/rw"; do
  if mountpoint -q "$m" 2>/dev/null || grep -qs " $m " /proc/mounts; then
    fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" || true
  fi
done
rm -rf "$DIR/checkpoints" "$DIR/exports"
mkdir -p "$DIR/mnt"
"$KAFKAFS" demo "$DIR/logs" --force
if "$KAFKAFS" mount "$DIR/logs" "$DIR/mnt"; then
  M="$DIR/mnt"
  cat <<MSG

The demo log directory $DIR/logs is mounted at $M (read-only). Try:

  ls $M                                        # one folder per partition
  ls -l $M/orders-0                            # records.jsonl, by-offset/, by-time/, segments/, ...
  head -3 $M/orders-0/records.jsonl            # every record, one JSON object a line
  jq .value $M/orders-0/by-offset/42.json      # one record
  cat $M/orders-0/by-offset/10-14.jsonl        # a range of offsets
  cat $M/orders-0/by-time/2026-11-21T11:00:00Z.json          # first record at or after a time
  grep -c '"status":"paid"' $M/orders-*/records.jsonl
  cat $M/payments-0/records.jsonl              # transactions, with COMMIT/ABORT markers
  tail -n 1 -f $M/orders-0/records.jsonl &     # follow the partition, then append to it:
  echo '{"key":"c-0001","value":{"order":1,"status":"new"}}' | $KAFKAFS produce $DIR/logs orders-0
  echo 'plain text works too' | $KAFKAFS produce $DIR/logs orders-0
  kill \$!                                      # stop following
  $KAFKAFS verify $DIR/logs                    # CRCs, offsets, indexes (read-only, safe while mounted)
  $KAFKAFS dump $DIR/logs/orders-0/00000000000000000000.log | head

Then README's snippets, in order (. .venv/bin/activate puts kafkafs and PySpark's Python on PATH).
Unmount with: fusermount3 -u $M
MSG
else
  echo "kafkafs: the mount did not work here (is /dev/fuse available?); showing the data with consume instead" >&2
  "$KAFKAFS" consume "$DIR/logs" orders-0 --max-records 3
  "$KAFKAFS" verify "$DIR/logs"
fi
