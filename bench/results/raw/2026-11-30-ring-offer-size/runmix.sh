#!/bin/bash
tag=$1; rounds=$2; shift 2
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
$J/java -cp $(cat /tmp/offersize/cp.txt):/tmp/offersize/drv --enable-native-access=ALL-UNNAMED \
  -XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=/tmp/offersize/$tag.log "$@" OfferMix $rounds $APPARGS > /tmp/offersize/$tag.out 2>&1
tail -1 /tmp/offersize/$tag.out
python3 /tmp/offersize/inl.py /tmp/offersize/$tag.log OfferMix
