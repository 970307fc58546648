#!/bin/bash
# ABBA over 4 rounds: RingOpCostBenchmark (one thread, write then read back) with the change (default) and the control
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin; CP=$(cat /tmp/h64e/real-cp.txt)
for r in 0 1 2 3; do
  if [ $((r % 2)) = 0 ]; then order="change control"; else order="control change"; fi
  for side in $order; do
    extra=""; [ $side = control ] && extra="-jvmArgsPrepend -Dsymmem4j.ring.inlineCopy=false"
    timeout 300 $J/java --enable-native-access=ALL-UNNAMED -cp $CP -Djmh.ignoreLock=true org.openjdk.jmh.Main 'RingOpCostBenchmark' \
      -p kind=SYMMEM_ONE_TO_ONE,AGRONA_ONE_TO_ONE,SYMMEM_MANY_TO_ONE,AGRONA_MANY_TO_ONE -p messageBytes=64,4096 \
      -f 1 -wi 3 -w 500ms -i 4 -r 500ms $extra -rf json -rff $side-$r.json > $side-$r.txt 2>&1
    echo "round $r $side rc=$?"
  done
done
