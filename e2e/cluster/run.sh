#!/usr/bin/env bash
# make cluster: three brokers on 127.0.0.1:9092-9094 sharing one data directory
# (./data-cluster by default), the static registry. Ctrl-C stops them gracefully.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${KAAS_CLUSTER_DATA:-./data-cluster}
PEERS=0@127.0.0.1:9092,1@127.0.0.1:9093,2@127.0.0.1:9094
pids=()
stop() { kill -TERM "${pids[@]}" 2>/dev/null || true; wait; }
trap stop INT TERM EXIT
for i in 0 1 2; do
  bin/kaas --node.id=$i --registry=static --registry.peers=$PEERS \
    --listeners=PLAINTEXT://127.0.0.1:909$((2 + i)) --http.listen=127.0.0.1:964$((4 + i)) \
    --data.dir="$DATA" --log.format=console > >(sed -u "s/^/[broker $i] /") 2>&1 &
  pids+=($!)
done
echo "kaas cluster: 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 (data in $DATA); Ctrl-C stops it"
wait
