# Samples GPU memory per process with its command line, every 2 s, until killed. Start it in the
# background and stop it by its pid (`bash benchmarks/gpu_memwatch.sh > log & W=$!; ...; kill $W`):
# a `pkill -f gpu_memwatch` also matches a device call whose command line names it (run 13 lost a part so).
while true; do
  date +%T
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null | while IFS=, read pid mem; do
    echo "  $pid $mem $(ps -o args= -p $pid 2>/dev/null | cut -c1-150)"; done
  sleep 2
done
