#!/bin/bash
# usage: run.sh tag kind size rounds [extra jvm flags]
tag=$1; kind=$2; size=$3; rounds=$4; shift 4
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
$J/java -cp $(cat /tmp/offersize/cp.txt):/tmp/offersize/drv --enable-native-access=ALL-UNNAMED \
  -XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=/tmp/offersize/$tag.log "$@" RttJit $kind $size $rounds > /tmp/offersize/$tag.out 2>&1
python3 /tmp/offersize/jit.py /tmp/offersize/$tag.log > /tmp/offersize/$tag.txt
cat /tmp/offersize/$tag.out | tail -2
grep -E "offer|task" /tmp/offersize/$tag.txt
