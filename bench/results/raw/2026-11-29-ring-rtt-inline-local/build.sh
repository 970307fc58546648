#!/bin/bash
# compiles the worktree's RingBufferLayout and SymmetricRingBuffer over mvn's classes into /tmp/rttjit/cls-$1
set -e
W=/work/wt/h-ringrtt; J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
rm -rf /tmp/rttjit/cls-$1; mkdir -p /tmp/rttjit/cls-$1/p /tmp/rttjit/cls-$1/s
cp -r $W/parallel/target/classes/. /tmp/rttjit/cls-$1/p/; cp -r $W/state/target/classes/. /tmp/rttjit/cls-$1/s/
$J/javac -nowarn -cp /tmp/rttjit/cls-$1/p -d /tmp/rttjit/cls-$1/p $W/parallel/src/main/java/org/symmem4j/parallel/layout/RingBufferLayout.java
$J/javac -nowarn -cp /tmp/rttjit/cls-$1/p:/tmp/rttjit/cls-$1/s -d /tmp/rttjit/cls-$1/s $W/state/src/main/java/org/symmem4j/state/SymmetricRingBuffer.java 2>&1 | grep -v '^Note' || true
