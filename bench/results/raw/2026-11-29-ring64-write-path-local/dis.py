#!/usr/bin/env python3
"""dis.py LOG [filter]: every C2 nmethod printed by -XX:CompileCommand=print without hsdis (hex [MachCode]),
disassembled with objdump; the relocation notes ({poll_return}, {runtime_call ...}) kept as comments."""
import re, subprocess, sys, tempfile
log = open(sys.argv[1], errors='replace').read()
flt = sys.argv[2] if len(sys.argv) > 2 else ''
for m in re.finditer(r'Compiled method \((c\d)\)\s+\d+\s+\d+\s+[%sbn! ]*\d\s+(\S+) \((\d+) bytes\)(.*?)\[MachCode\](.*?)\[/MachCode\]', log, re.S):
    tier, name, bc, head, body = m.groups()
    if flt not in name or tier != 'c2':
        continue
    mc = re.search(r'main code\s+\[(0x[0-9a-f]+),(0x[0-9a-f]+)\] = (\d+)', head)
    data = bytearray(); start = None; notes = {}
    for line in body.splitlines():
        lm = re.match(r'\s*(0x[0-9a-f]+): (.*)', line)
        if not lm:
            continue
        addr = int(lm.group(1), 16); rest = lm.group(2)
        if rest.startswith(';'):
            notes.setdefault(addr, []).append(rest.strip('; ').strip())
            continue
        hx = rest.replace('|', '').replace(' ', '')
        if not re.fullmatch(r'[0-9a-f]*', hx):
            continue
        if start is None:
            start = addr
        off = addr - start
        if off > len(data):
            data.extend(b'\x90' * (off - len(data)))
        data[off:off + len(hx) // 2] = bytes.fromhex(hx)
    end = int(mc.group(2), 16) if mc else start + len(data)
    with tempfile.NamedTemporaryFile(suffix='.bin') as f:
        f.write(data[:end - start]); f.flush()
        out = subprocess.run(['objdump', '-D', '-b', 'binary', '-m', 'i386:x86-64', '--adjust-vma=%d' % start, f.name],
                             capture_output=True, text=True).stdout
    print('=' * 20, tier, name, bc, 'bytecode bytes; main code', mc.group(3) if mc else '?')
    for line in out.splitlines():
        im = re.match(r'\s*([0-9a-f]+):\t', line)
        if not im:
            continue
        a = int(im.group(1), 16)
        for n in notes.get(a, []):
            print('      ;', n)
        print(line)
