# The set-up every bench/*.sh script shares; sourced, not run. It sets
#   here  the checkout, B  the hpctrain binary ($BIN/hpctrain, BIN defaults
#   to the checkout's build), S  scripts/netns-cluster.sh,
# pins one thread per rank (OMP and OpenBLAS), and gives:
#   bench_out DIR   makes DIR, empties DIR/runs.jsonl, and sets OUT=DIR;
#   log WORDS       a line with the time and load average, to stderr and OUT/log;
#   summarise       logs "done", then runs the Python summary on stdin with
#                   json, statistics, sys imported and `rows` holding
#                   OUT/runs.jsonl's objects;
#   nginx_conf LISTEN ROOT  writes OUT/nginx/nginx.conf: one worker serving
#                   ROOT on LISTEN (ADDR:PORT), pid file OUT/nginx.pid.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=${BIN:-$here/build/tools/hpctrain}/hpctrain
S=$here/scripts/netns-cluster.sh
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
bench_out() { OUT=$1; mkdir -p "$OUT" && : > "$OUT/runs.jsonl"; }
log() { echo "$(date -u +%H:%M:%S) load=$(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a "$OUT/log" >&2; }
summarise() {
  log done
  { printf '%s\n' 'import json, statistics, sys' \
      'rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]'; cat; } |
    /usr/bin/python3 - "$OUT/runs.jsonl"
}
nginx_conf() {
  mkdir -p "$OUT/nginx"
  rm -f "$OUT/nginx.pid"
  cat > "$OUT/nginx/nginx.conf" <<CONF
daemon on; worker_processes 1; pid $OUT/nginx.pid; error_log $OUT/nginx/error.log;
events { worker_connections 64; }
http { access_log off; sendfile on; client_body_temp_path $OUT/nginx;
  proxy_temp_path $OUT/nginx; fastcgi_temp_path $OUT/nginx; uwsgi_temp_path $OUT/nginx;
  scgi_temp_path $OUT/nginx; server { listen $1; root $2; } }
CONF
}
