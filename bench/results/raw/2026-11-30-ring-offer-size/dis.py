"""Disassembles the C2 (tier 4) nmethod(s) in a -XX:+PrintAssembly dump without hsdis, interleaving HotSpot's own
annotations (call kinds, debug info with bci chains). Usage: dis.py dump.txt [index of c2 nmethod, default last]"""
import re, subprocess, sys, tempfile
txt = open(sys.argv[1]).read().split('\n')
starts = [i for i, l in enumerate(txt) if l.startswith('Compiled method (c2)')]
which = int(sys.argv[2]) if len(sys.argv) > 2 else -1
s = starts[which]
print(txt[s]); print(txt[s+2]); print(txt[s+3])
code = {}  # addr -> bytes
notes = {}  # addr -> [lines]
i = s
while i < len(txt) and '[Stub Code]' not in txt[i] and not (i > s and txt[i].startswith('Compiled method')):
    l = txt[i]
    m = re.match(r'\s+0x([0-9a-f]+): (;.*)', l)
    if m:
        a = int(m.group(1), 16); notes.setdefault(a, []).append(m.group(2))
        # following indented lines without address are continuation notes
        j = i + 1
        while j < len(txt) and re.match(r'\s{20,};', txt[j]):
            notes[a].append(txt[j].strip()); j += 1
        i = j; continue
    m = re.match(r'\s+0x([0-9a-f]+): ([0-9a-f| ]+)$', l)
    if m:
        a = int(m.group(1), 16); hx = m.group(2).replace('|', '').replace(' ', '')
        code[a] = bytes.fromhex(hx)
    i += 1
base = min(code); blob = bytearray()
for a in sorted(code):
    assert a == base + len(blob), hex(a)
    blob += code[a]
with tempfile.NamedTemporaryFile(suffix='.bin', delete=False) as f:
    f.write(blob)
out = subprocess.run(['objdump', '-D', '-b', 'binary', '-mi386:x86-64', '--adjust-vma=' + hex(base), f.name],
                     capture_output=True, text=True).stdout
for l in out.split('\n'):
    m = re.match(r'\s+([0-9a-f]+):\t', l)
    if m:
        a = int(m.group(1), 16)
        for n in notes.pop(a, []):
            print('                      ' + n)
        print(l)
for a in sorted(notes):
    print('unplaced', hex(a), notes[a])
