#!/usr/bin/env python3
"""hex-disasm.py LOG [FILTER]: HotSpot's -XX:CompileCommand=print output printed as hex (no hsdis library), each
compiled method whose header line contains FILTER disassembled with objdump, HotSpot's annotations kept in place."""
import re, subprocess, sys, tempfile, os
log = open(sys.argv[1], errors='replace').read().splitlines()
flt = sys.argv[2] if len(sys.argv) > 2 else ''
i = 0
while i < len(log):
    line = log[i]
    if line.startswith('Compiled method') and flt in line:
        header = line
        # collect until [Exception Handler] or [Stub Code]
        blob = bytearray(); start = None; notes = {}
        j = i + 1
        while j < len(log) and not log[j].startswith('Compiled method'):
            l = log[j]
            if l.startswith('[Exception Handler]') or l.startswith('[Stub Code]'):
                break
            m = re.match(r'\s+0x([0-9a-f]+): (.*)', l)
            if m:
                addr = int(m.group(1), 16); rest = m.group(2)
                if rest.startswith(';'):
                    notes.setdefault(addr, []).append(rest.strip())
                else:
                    hexs = rest.replace('|', '').split()
                    if start is None: start = addr
                    b = bytes.fromhex(''.join(hexs))
                    assert addr == start + len(blob), (hex(addr), hex(start + len(blob)))
                    blob += b
            elif l.strip().startswith('#') or l.strip().startswith(';'):
                pass
            j += 1
        print('=' * 100); print(header)
        if start is not None:
            with tempfile.NamedTemporaryFile(delete=False) as f:
                f.write(blob); name = f.name
            out = subprocess.run(['objdump', '-D', '-b', 'binary', '-m', 'i386:x86-64', '--adjust-vma=' + hex(start), name],
                                 capture_output=True, text=True).stdout
            os.unlink(name)
            for ol in out.splitlines():
                m = re.match(r'\s*([0-9a-f]+):', ol)
                if m:
                    a = int(m.group(1), 16)
                    for n in notes.get(a, []): print('    ' * 6 + n)
                    print(ol)
        i = j
    else:
        i += 1
