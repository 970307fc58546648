#!/bin/bash
# usage: traps.sh tag Main args...   -> prints offer's C2 size and its uncommon traps (innermost frame)
tag=$1; shift
J=/usr/lib/jvm/temurin-25-jdk-amd64/bin
$J/java -cp $(cat /tmp/offersize/cp.txt):/tmp/offersize/drv --enable-native-access=ALL-UNNAMED -XX:+UnlockDiagnosticVMOptions -XX:CompileCommand=print,org.symmem4j.state.SymmetricRingBuffer::offer "$@" > /tmp/offersize/print-$tag.txt 2>&1
python3 /tmp/offersize/dis.py /tmp/offersize/print-$tag.txt > /tmp/offersize/$tag.dis
head -2 /tmp/offersize/$tag.dis | tail -1
python3 - /tmp/offersize/$tag.dis <<'PY'
import re,ast,sys
lines=open(sys.argv[1]).read().split('\n')
addrs=[int(m.group(1),16) for l in lines for m in [re.match(r'\s+([0-9a-f]+):\t',l)] if m]
ret=[int(re.match(r'\s+([0-9a-f]+):',l).group(1),16) for l in lines if '\tret' in l]
print('  first ret at +%d' % (ret[0]-addrs[0]))
for l in lines:
    if not l.startswith('unplaced'): continue
    notes=ast.literal_eval(l.split(' ',2)[2])
    fr=[n for n in notes if n.startswith('; -')]
    head=[n for n in notes if n.startswith(';*')]
    if not head: continue
    print('  ', head[0].split(' {')[0], '|', fr[0][4:].split(' (line')[0] if fr else '')
PY
