#!/usr/bin/env python3
"""Checks every relative link in README.md and docs/**/*.md: the file exists and, for a link into a
Markdown file with #anchor, the heading exists (GitHub's slugs). Exit 1 naming each broken link."""
import os, re, sys, glob
root = sys.argv[1] if len(sys.argv) > 1 else '.'
os.chdir(root)
files = ['README.md'] + sorted(glob.glob('docs/**/*.md', recursive=True))
def strip_code(text):
    out, code = [], False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'):
            code = not code; out.append(''); continue
        out.append('' if code else re.sub(r'`[^`]*`', lambda m: m.group(0) if '](' not in m.group(0) else '', line))
    return '\n'.join(out)
def slugs(path):
    found, seen = set(), {}
    code = False
    for line in open(path, encoding='utf-8'):
        if line.lstrip().startswith('```'): code = not code; continue
        m = not code and re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if m:
            s = m.group(2).lower()
            s = re.sub(r'[^\w\- ]', '', s).replace(' ', '-')
            n = seen.get(s, 0); seen[s] = n + 1
            found.add(s if n == 0 else f'{s}-{n}')
    return found
bad = 0
for f in files:
    text = strip_code(open(f, encoding='utf-8').read())
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
        if re.match(r'^[a-z]+:', target) or target.startswith('<'):
            continue
        path, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(dest):
            print(f'{f}: {target}: no such file {dest}'); bad += 1; continue
        if anchor and dest.endswith('.md') and anchor not in slugs(dest):
            print(f'{f}: {target}: no heading #{anchor} in {dest}'); bad += 1
print(f'{len(files)} files checked, {bad} broken links')
sys.exit(1 if bad else 0)
