#!/bin/bash
# Ground truth without tracer: stands in for the tracer binary
# (TRACER_BIN=this tracer-demo --scenario NAME), so the scene is built and
# its traffic sent exactly as for a traced run, while nothing of tracer is
# loaded. At start it turns on a tracefs instance of its own (xdp:* and
# skb:kfree_skb for IPv4) and BPF run counts; on SIGINT it prints, per
# namespace of the demo, nstat's non-zero counters and `ip -s link`, the
# XDP programs' run counts, and the kernel's events; then undoes it all.
ready=""; prev=""
for a in "$@"; do [ "$prev" = "--ready-file" ] && ready="$a"; prev="$a"; done
T=/sys/kernel/tracing/instances/xdp-gt
rmdir $T 2>/dev/null; mkdir $T
echo 'protocol == 2048' > $T/events/skb/kfree_skb/filter
echo 1 > $T/events/skb/kfree_skb/enable
echo 1 > $T/events/xdp/enable
old_stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
echo 1 > /proc/sys/kernel/bpf_stats_enabled
dump() {
  echo 1 > /dev/null
  for n in $(ip netns list | awk '/^demo-/{print $1}'); do
    echo "### netns $n: nstat -as (non-zero)"
    ip netns exec $n nstat -as 2>/dev/null | grep -v '^#' | grep -Ev '^(Ip6|Icmp6|Udp6|UdpLite)' 
    echo "### netns $n: ip -s -br link / xdp"
    bridge -n $n fdb show 2>/dev/null | grep -v permanent | sed "s/^/fdb: /"
    ip -n $n -s link show | grep -E '^[0-9]+:|RX:|TX:|^ +[0-9]|xdp' 
  done
  echo "### XDP programs (bpftool, run counts)"
  bpftool prog show 2>/dev/null | grep -A0 -E ' xdp ' | grep -E 'xdp_|balancer' 
  echo "### tracefs: xdp:* and skb:kfree_skb (IPv4)"
  grep -v '^#' $T/trace | sed -E 's/^ +//'
  echo 0 > $T/events/xdp/enable; echo 0 > $T/events/skb/kfree_skb/enable
  echo 0 > $T/events/skb/kfree_skb/filter
  rmdir $T
  echo $old_stats > /proc/sys/kernel/bpf_stats_enabled
  exit 0
}
trap dump INT TERM
touch "$ready"
while :; do sleep 0.2; done
