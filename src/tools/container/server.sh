C=/.agentbatch
exec 3<"$C/req" 4>"$C/done"
echo ready >&4
oom() { sed -n 's/^oom_kill //p' /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null | head -n 1; }
while IFS= read -r line <&3; do
  case "$line" in
    t*) p=$(cat "$C/${line#t}.pid" 2>/dev/null) && kill -TERM -"$p" 2>/dev/null ;;
    Q) r=0; while [ $r -lt 10 ]; do r=$((r+1)); for p in /proc/[0-9]*; do p=${p#/proc/}; [ "$p" = 1 ] || kill -KILL "$p" 2>/dev/null; done; done; echo "0 0" >&4 ;;
    k*) p=$(cat "$C/${line#k}.pid" 2>/dev/null) && { kill -KILL -"$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; } ;;
    *) (sh "$C/$line.sh" <&- 3<&- 4>&-; echo "$line $? $(oom)" >&4) 3<&- & ;;
  esac
done
