#!/bin/bash
# run.sh VARIANT one|many SIZE [rounds]: RttJit with LogCompilation on the classes of build.sh VARIANT
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin; C=/tmp/rttjit/cls-$1
cd /tmp/rttjit
$J/java --enable-native-access=ALL-UNNAMED -cp $C/p:$C/s:. -XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=$1-$2-$3.log RttJit $2 $3 ${4:-2000000}
python3 jit.py $1-$2-$3.log RttJit | grep -v 'RttJit\$\$Lambda.*nmethod' > $1-$2-$3.txt
cat $1-$2-$3.txt
