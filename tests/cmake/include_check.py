#!/usr/bin/env python3
"""Include discipline: every #include "FOLDER/..." in a layered folder must name a folder that
folder's CMake target links (the rules file is written by cmake/HvdIncludeRules.cmake from the
targets themselves). "hvd/build_config.h" (generated) is open to all; the other "hvd/" headers
are libhvd's public API, open to allreduce/ alone among the layered folders. Language bindings
(python/) sit on that public API only: they may include "hvd/..." but nothing under allreduce/.

A rules folder may be nested (launcher/native): a file belongs to the longest rules folder its
path starts with, and an include names the longest rules folder its path starts with, so the
parts inside launcher/ are checked against each other as the top-level folders are.

Usage: include_check.py RULES_FILE ROOT      exit 0 clean, 1 with one line per violation
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# Folders that link libhvd but may use only its public headers (hvd/hvd.hpp, hvd/hvd.h).
PUBLIC_API_ONLY = {"python"}


def rules_folder(path, folders):
    """The longest rules folder `path` (a/b/c.h) lies in, or its first component."""
    parts = path.split("/")
    for n in range(len(parts) - 1, 0, -1):
        candidate = "/".join(parts[:n])
        if candidate in folders:
            return candidate
    return parts[0]


def main():
    rules_file, root = sys.argv[1], sys.argv[2]
    rules = {}
    with open(rules_file) as f:
        for line in f:
            folder, _, allowed = line.partition(":")
            rules[folder.strip()] = set(allowed.split())
    folders = set(rules)
    bad = []
    for folder, allowed in sorted(rules.items()):
        base = os.path.join(root, folder)
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith((".h", ".hpp", ".cpp", ".c")):
                    continue
                path = os.path.join(dirpath, name)
                # A file in a nested rules folder is checked under that folder's rule.
                if rules_folder(os.path.relpath(path, root).replace(os.sep, "/"),
                                folders) != folder:
                    continue
                with open(path, errors="replace") as f:
                    for number, text in enumerate(f, 1):
                        m = INCLUDE.match(text)
                        if not m:
                            continue
                        target = m.group(1)
                        top = rules_folder(target, folders)
                        if folder in PUBLIC_API_ONLY and top == "allreduce":
                            rel = os.path.relpath(path, root)
                            bad.append(f'{rel}:{number}: includes "{target}", libhvd\'s '
                                       f'internals: {folder}/ uses libhvd\'s public API only '
                                       f'("hvd/hvd.hpp"); add what it lacks there')
                            continue
                        if top == "hvd":
                            if target == "hvd/build_config.h" or folder == "allreduce":
                                continue
                            top = "allreduce"
                        if top in folders and top not in allowed:
                            rel = os.path.relpath(path, root)
                            bad.append(f'{rel}:{number}: includes "{target}", but {folder}/ '
                                       f'links only {", ".join(sorted(allowed))}: link the '
                                       f'target of {top}/ where {folder}/ is built (if the '
                                       f'dependency is right), or move the code')
    for line in bad:
        print(line)
    if bad:
        print(f"include_check: {len(bad)} include(s) against the layering", file=sys.stderr)
        return 1
    print(f"include_check: {len(rules)} folders clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
