#!/bin/bash
# usage: matrix.sh label  -> one line per cell: offer's C2 sizes (each nmethod) and the callers' inline decisions for offer
label=$1; shift
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
cell() { # name main args...
  name=$1; main=$2; shift 2
  for rep in 1 2 3; do
    log=/tmp/offersize/m-$label-$name-$rep.log
    $J/java -cp $(cat /tmp/offersize/cp.txt):/tmp/offersize/drv --enable-native-access=ALL-UNNAMED $JFLAGS \
      -XX:+UnlockDiagnosticVMOptions -XX:+LogCompilation -XX:LogFile=$log $main "$@" > /dev/null 2>&1
    sizes=$(python3 /tmp/offersize/inl.py $log $main | grep "nmethod.*SymmetricRingBuffer offer " | awk '{print $NF}' | tr '\n' ',')
    dec=$(python3 /tmp/offersize/inl.py $log $main | grep -E "[^/]->org.symmem4j.state.SymmetricRingBuffer.offer:" | grep -v "^ *offer->" | sed -E 's/.*offer: //' | sort | uniq -c | tr -s ' ' | tr '\n' ';')
    copy=$(python3 /tmp/offersize/inl.py $log $main | grep -E "offer->.*(copy|copyPayloadAt): " | sed -E 's/^ *offer->[^ ]*\.//' | sort -u | tr '\n' ';')
    echo "$label $name rep$rep offer_c2_bytes=$sizes callers:$dec offer's copy:$copy"
  done
}
cell one64 RttJit one 64 2000000
cell many64 RttJit many 64 2000000
cell one4096 RttJit one 4096 500000
cell many4096 RttJit many 4096 500000
cell mix-all OfferMix 3000000 both both
cell mix-one-native OfferMix 3000000 one native
