#!/bin/bash
# suite.sh NAME ARGS...: RingPairedSuite on the worktree's classes (state and parallel from build.sh v4)
N=$1; shift
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
D=/tmp/rttjit/suite-$N; rm -rf $D; mkdir -p $D; cd $D
CP=$(cat /tmp/rttjit/real-cp.txt)
timeout 300 $J/java --enable-native-access=ALL-UNNAMED -cp $CP org.symmem4j.benchmarks.RingPairedSuite --out $D "$@" > suite.txt 2>&1
echo rc $? >> suite.txt
