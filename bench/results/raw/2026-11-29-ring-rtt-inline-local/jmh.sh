#!/bin/bash
# jmh.sh VARIANT NAME JMH-ARGS...: the real RingBenchmark (fork + peer) with LogCompilation in every JVM, on the classes of build.sh VARIANT
V=$1; N=$2; shift 2
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
D=/tmp/rttjit/real-$N; rm -rf $D; mkdir -p $D; cd $D
CP=/tmp/rttjit/cls-$V/p:/tmp/rttjit/cls-$V/s:$(cat /tmp/rttjit/real-cp.txt)
JAVA_TOOL_OPTIONS="-XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=$D/jit-%p.log" timeout 300 $J/java -cp $CP org.openjdk.jmh.Main "$@" > jmh.txt 2>&1
echo rc $?; grep -E "^Benchmark|roundTrip|p0.50|p0.99" jmh.txt | tail -8
