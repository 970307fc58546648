#!/bin/bash
# ABBA over rounds, each JVM one setting: MinRtt per kind and size
for r in 0 1 2 3 4 5; do
  if [ $((r % 2)) = 0 ]; then order="true false"; else order="false true"; fi
  for v in $order; do
    for k in "one 64" "many 4096" "many 64" "one 4096"; do
      timeout 120 /usr/lib/jvm/temurin-25-jdk-amd64/bin/java --enable-native-access=ALL-UNNAMED -Dsymmem4j.ring.inlineCopy=$v -cp /work/wt/h-ring64e/parallel/target/classes:/work/wt/h-ring64e/state/target/classes:/root/.m2/repository/org/slf4j/slf4j-api/2.0.7/slf4j-api-2.0.7.jar:. MinRtt $k 600 2>&1 | grep -v SLF4J | sed "s/^/round $r /"
    done
  done
done
