#!/usr/bin/env bash
# Sample the host every 5 s (what ran beside a GPU audit): load, mean CPU MHz, /proc/stat (busy, steal) and the
# processes by CPU time. Used for docs/RESULTS.md, every-family fourth set:
#   (bash bench/psloop.sh > OUT/ps.txt &) ; bash bench/gpu_families.sh OUT q3-4b ; pkill -f psloop.sh
while :; do
  echo "== $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) mhz $(awk '/^cpu MHz/{s+=$4;n++}END{if(n)printf "%.0f",s/n}' /proc/cpuinfo)"
  head -1 /proc/stat
  ps -eo pid,ppid,nlwp,pcpu,time,rss,args --sort=-time 2>/dev/null | cut -c1-160 | head -16
  sleep 5
done
