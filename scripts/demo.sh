#!/usr/bin/env bash
# Installs everything (scripts/bootstrap.sh), writes a demo log directory and mounts it read-write,
# then prints a few things to try. Usage: scripts/demo.sh [DIR]   (default /tmp/kafkafs-demo)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
DIR="${1:-${KAFKAFS_DEMO:-/tmp/kafkafs-demo}}"
KAFKAFS="$PWD/.venv/bin/kafkafs"
mkdir -p "$DIR/mnt"
if mountpoint -q "$DIR/mnt" 2>/dev/null || grep -qs " $DIR/mnt " /proc/mounts; then
  fusermount3 -u "$DIR/mnt" 2>/dev/null || fusermount3 -uz "$DIR/mnt" || true
fi
"$KAFKAFS" demo "$DIR/logs" --force
if "$KAFKAFS" mount --rw "$DIR/logs" "$DIR/mnt"; then
  M="$DIR/mnt"
  cat <<MSG

The demo log directory $DIR/logs is mounted at $M (read-write). Try:

  ls $M                                        # one folder per partition
  ls -l $M/orders-0                            # records.jsonl, by-offset/, by-time/, segments/, ...
  head -3 $M/orders-0/records.jsonl            # every record, one JSON object a line
  jq .value $M/orders-0/by-offset/42.json      # one record
  cat $M/orders-0/by-offset/10-14.jsonl        # a range of offsets
  cat $M/orders-0/by-time/2026-11-21T11:00:00Z.json          # first record at or after a time
  grep -c '"status":"paid"' $M/orders-*/records.jsonl
  cat $M/payments-0/records.jsonl              # transactions, with COMMIT/ABORT markers
  tail -f $M/orders-0/records.jsonl &          # then, in another shell:
  echo '{"key":"c-0001","value":{"order":1,"status":"new"}}' >> $M/orders-0/append
  echo 'plain text works too' >> $M/orders-0/append
  $KAFKAFS verify $DIR/logs                    # CRCs, offsets, indexes (read-only, safe while mounted)
  $KAFKAFS dump $DIR/logs/orders-0/00000000000000000000.log | head

Unmount with: fusermount3 -u $M
MSG
else
  echo "kafkafs: the mount did not work here (is /dev/fuse available?); showing the data with consume instead" >&2
  "$KAFKAFS" consume "$DIR/logs" orders-0 --max-records 3
  "$KAFKAFS" verify "$DIR/logs"
fi
