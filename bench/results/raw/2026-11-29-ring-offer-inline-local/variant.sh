#!/bin/bash
# usage: variant.sh NAME  (state/src/.../SymmetricRingBuffer.java already patched); compiles into target/classes, runs OfferJit with LogCompilation
set -e
cd /work/wt/h-ringinline
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
$J/javac -nowarn -cp parallel/target/classes:state/target/classes -d state/target/classes state/src/main/java/org/symmem4j/state/SymmetricRingBuffer.java 2>&1 | grep -v "^Note" || true
cd /tmp/rjit
CP=/work/wt/h-ringinline/parallel/target/classes:/work/wt/h-ringinline/state/target/classes
$J/java -cp $CP:. -XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=$1.log OfferJit 64 >/dev/null 2>&1
python3 jitparse.py $1.log | grep -v Lambda > $1.txt
grep -E "offer|reserve|copy|claimMany|osr" $1.txt
