#!/usr/bin/env bash
# Fetches Apache Kafka's jars for the broker tests (tests/broker/) into .kafka/<version>/libs, with mvn
# from Maven Central (scripts/kafka/pom.xml names what: the broker, its tools and their dependencies).
# Idempotent: a version whose libs folder is complete (.kafka/<version>/libs.complete) is not fetched
# again. Offline-tolerant: a version that cannot be fetched is said on stderr and skipped (exit 0), so
# bootstrap goes on and the broker tests skip and say why; --strict makes any failure exit 1.
#
# Usage: scripts/fetch_kafka.sh [--strict] [VERSION...]    (default: every version in KAFKA_VERSIONS)
#   KAFKA_VERSIONS   the versions to fetch, newest first (default: "4.4.0 3.9.2": the newest Kafka 4.x
#                    that Maven Central serves, and the newest 3.9, which brokers in the field still run)
#   KAFKAFS_KAFKA_HOME   where the versions go (default: .kafka in the checkout)
set -uo pipefail
cd "$(dirname "$0")/.."

say() { printf '[kafka] %s\n' "$*" >&2; }

strict=0
versions=()
for arg in "$@"; do
  case "$arg" in
    --strict) strict=1 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) say "unknown option: $arg"; exit 2 ;;
    *) versions+=("$arg") ;;
  esac
done
if [ ${#versions[@]} -eq 0 ]; then
  read -r -a versions <<<"${KAFKA_VERSIONS:-4.4.0 3.9.2}"
fi
home="${KAFKAFS_KAFKA_HOME:-$PWD/.kafka}"
pom="$PWD/scripts/kafka/pom.xml"

# the slf4j binding a Kafka version's distribution adds (4.x: log4j2's, at the log4j version the broker
# depends on; 3.x: none needed, slf4j-reload4j is a dependency of its broker jar)
log4j2_for() {
  case "$1" in
    4.*) echo 2.25.5 ;;
    *) echo "" ;;
  esac
}

if ! command -v mvn >/dev/null 2>&1; then
  say "mvn is not installed (scripts/bootstrap.sh installs Debian's maven): no Kafka jars, the broker tests will skip"
  exit $strict
fi

failed=0
for v in "${versions[@]}"; do
  dest="$home/$v/libs"
  if [ -f "$dest.complete" ] && [ -d "$dest" ]; then
    say "Kafka $v: jars ready in $dest ($(ls "$dest" | wc -l) jars)"
    continue
  fi
  say "Kafka $v: fetching the broker and its tools with mvn into $dest (the first time takes about a minute)"
  tmp="$home/$v/libs.partial.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  args=(-B -q -f "$pom" dependency:copy-dependencies -Dkafka.version="$v" -DincludeScope=runtime
        -DoutputDirectory="$tmp")
  l4j=$(log4j2_for "$v")
  [ -n "$l4j" ] && args+=(-Dlog4j2.version="$l4j")
  log="$home/$v/mvn.log"
  start=$(date +%s)
  if mvn "${args[@]}" >"$log" 2>&1 && ls "$tmp" | grep -q "^kafka_2.13-$v.jar$"; then
    rm -rf "$dest" && mv "$tmp" "$dest"
    ls "$dest" >"$dest.complete"
    say "Kafka $v: $(ls "$dest" | wc -l) jars fetched in $(( $(date +%s) - start )) s"
  else
    rm -rf "$tmp"
    failed=1
    say "Kafka $v: could not fetch the jars (mvn said, full log: $log); the broker tests on $v will skip"
    sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -m 2 '\[ERROR\] .\{20,\}' | cut -c1-300 | sed 's/^/[kafka]   /' >&2
  fi
done
[ $strict -eq 1 ] && exit $failed
exit 0
