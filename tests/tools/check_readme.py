#!/usr/bin/env python3
"""Checks that README.md and docs/*.md name only things that exist:

- job spec fields, written as backticked dotted paths that start with one of the spec's top-level
  keys (`run.checkpoint.every_steps`, `zero.offload_param`, `runtime_env.env_vars.OMP_NUM_THREADS`),
  against the fields docs/job-spec.md lists in its tables and its list of accepted and ignored
  DeepSpeed keys (tests/config/test_spec_docs.cpp keeps those equal to the parser); a key under a
  free-form object (`runtime_env.env_vars`, an inline `model.config`) is taken as its object, and
  `zero.*` as `zero`;
- program options written after a program name (`cluster-head --storage-root DIR`,
  `submit --local run JOB.json`, `cohort-ckpt export CKPT --hf OUT`), in a code span or a line of a
  shell code block, against what `BIN_DIR/PROGRAM --help` prints (and, for a subcommand the help
  lists, `PROGRAM SUBCOMMAND --help`); a code span that is an option alone (`--connect-timeout`)
  or a subcommand with options (`export CKPT --peft OUT`) is checked against the program named
  last before it in the same paragraph, and passes as well when another program has the option
  (prose names options of programs it does not name right there);
- `scripts/NAME` mentions: the script must exist and be executable.

It prints every stale name with its file and line and exits 1, or prints what it checked and
exits 0.

    check_readme.py BIN_DIR REPO_ROOT      check the repository's README.md and docs/*.md
    check_readme.py --self-test BIN_DIR REPO_ROOT
                                           check that a copy of them with a wrong field, option
                                           and script in it fails, naming each
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The programs whose options are checked: the user-facing tools (cohort-local takes submit's
# options; cohort-chaos and cohort-sim are built with the tests and benchmarks). Only these are run,
# and only with --help.
PROGRAMS = ["submit", "cohort-local", "cluster-head", "cluster-worker", "cohort-worker", "cohort-data",
            "cohort-model", "cohort-ckpt", "cohort-mem", "cohort-bench", "cohort-chaos", "cohort-sim"]
# The programs that take a subcommand first (`cohort-data build --help` lists build's options); the
# others are only ever run with --help alone.
WITH_SUBCOMMANDS = {"submit", "cohort-local", "cohort-data", "cohort-model", "cohort-ckpt", "cohort-mem"}
SHELL_FENCES = {"", "sh", "bash", "shell", "console"}
# A dotted span whose last part is one of these is a file name (`model.safetensors`), not a field.
FILE_SUFFIXES = {"json", "jsonl", "md", "safetensors", "model", "txt", "csv", "py", "bin", "yaml",
                 "yml", "hpp", "cpp", "cu", "tokens", "idx", "sh"}

OPTION = re.compile(r"--[A-Za-z0-9][A-Za-z0-9-]*")
FIELD = re.compile(r"^([a-z_][a-z0-9_]*(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|\*))+)(?=$|[\s:=,)\[\]\"/])")
SCRIPT = re.compile(r"(?<![\w./-])(?:\./)?scripts/([A-Za-z0-9_][A-Za-z0-9_.-]*)")
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")  # a code span, on one line or across one line break


class Problems:
    def __init__(self):
        self.items = []

    def add(self, path, line, message):
        self.items.append((path, line, message))


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def split_markdown(text):
    """Prose blocks (paragraphs, list items, table rows) as (first line number, text) and shell code
    lines as (line number, text, with backslash continuations joined and comments cut)."""
    blocks, code = [], []
    fence, fence_lang = None, ""
    block, block_start = [], 0
    pending, pending_line = "", 0

    def flush():
        nonlocal block
        if block:
            blocks.append((block_start, "\n".join(block)))
        block = []

    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if fence is None:
            m = re.match(r"^\s*(```+|~~~+)\s*([A-Za-z0-9_-]*)", line)
            if m:
                flush()
                fence, fence_lang = m.group(1), m.group(2).lower()
                continue
            new_item = (re.match(r"^\s*([-*+]|\d+\.)\s", line) or stripped.startswith("|")
                        or stripped.startswith("#"))
            if not stripped or new_item:
                flush()
            if stripped:
                if not block:
                    block_start = number
                block.append(line)
                if stripped.startswith("|") or stripped.startswith("#"):
                    flush()
            continue
        if stripped.startswith(fence[:3]) and stripped.strip("`~") == "":
            fence = None
            continue
        if fence_lang not in SHELL_FENCES:
            continue
        if not pending:
            pending_line = number
        cut = re.sub(r"(^|\s)#.*$", "", line)
        if cut.rstrip().endswith("\\"):
            pending += cut.rstrip()[:-1] + " "
            continue
        code.append((pending_line, pending + cut))
        pending = ""
    flush()
    return blocks, code


def spec_fields(root):
    """The field paths docs/job-spec.md lists: the first cell of each table row, and the DeepSpeed
    keys its list "Accepted and ignored" names; and those that are free-form objects (of type object
    in their field table row, with no field of their own listed)."""
    fields, types = set(), {}
    ignored_list = False
    with open(os.path.join(root, "docs", "job-spec.md"), encoding="utf-8") as f:
        for line in f:
            stripped = line.strip()
            if stripped.startswith("Accepted and ignored"):
                ignored_list = True
                continue
            if ignored_list:
                if stripped.startswith("#"):
                    ignored_list = False
                else:
                    fields.update(re.findall(r"`(deepspeed\.[a-z0-9_.]+)`", stripped))
                continue
            if not stripped.startswith("|"):
                continue
            cells = [c.strip() for c in stripped.strip("|").split("|")]
            if len(cells) < 2:
                continue
            for name in re.findall(r"`([a-z_][a-z0-9_.]*)`", cells[0]):
                fields.add(name)
                if len(cells) >= 5:  # a field table: Field | Type | Default | Allowed | What it does
                    types[name] = cells[1]
    free = {f for f in fields if "object" in types.get(f, "")
            and not any(g.startswith(f + ".") for g in fields)}
    return fields, free


def check_field(path, fields, free, top):
    """None when the dotted path names a field, else the reason."""
    parts = path.split(".")
    if parts[0] not in top or parts[-1] in FILE_SUFFIXES:
        return None
    if parts[-1] == "*":
        prefix = ".".join(parts[:-1])
        return None if prefix in fields else "no field " + prefix + " in docs/job-spec.md"
    if path in fields:
        return None
    for i in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:i]) in free:
            return None
    return "no field " + path + " in docs/job-spec.md"


class Helps:
    """The options each program (and each subcommand its help lists) accepts, from --help."""

    def __init__(self, bin_dir):
        self.bin_dir = bin_dir
        self.cache = {}
        self.missing = set()

    def run(self, args):
        key = tuple(args)
        if key not in self.cache:
            try:
                p = subprocess.run([os.path.join(self.bin_dir, args[0])] + list(args[1:]),
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
                self.cache[key] = p.stdout + p.stderr
            except OSError:
                self.cache[key] = None
        return self.cache[key]

    def available(self, program):
        ok = os.access(os.path.join(self.bin_dir, program), os.X_OK)
        if not ok:
            self.missing.add(program)
        return ok

    def subcommands(self, program, words):
        """The words that the program's help lists as its subcommands: a line of the help (not a
        wrapped description, which is indented further) opens with the word."""
        if program not in WITH_SUBCOMMANDS:
            return []
        text = self.run([program, "--help"]) or ""
        found = []
        for w in words:
            pattern = (r"^\s{0,8}(?:usage:\s+)?(?:" + re.escape(program) + r"\s+)?" + re.escape(w)
                       + r"(?=\s|$)")
            if re.search(pattern, text, re.MULTILINE) and w not in found:
                found.append(w)
        return found

    def any_options(self):
        """Every option of every program's --help."""
        found = set()
        for program in PROGRAMS:
            if os.access(os.path.join(self.bin_dir, program), os.X_OK):
                found |= set(OPTION.findall(self.run([program, "--help"]) or ""))
        return found

    def options(self, program, words):
        text = self.run([program, "--help"]) or ""
        for sub in self.subcommands(program, words):
            text += self.run([program, sub, "--help"]) or ""
        return set(OPTION.findall(text))


def program_of(token):
    """The program a token names (`submit`, `build/bin/submit`, `build-cuda/bin/cluster-head`)."""
    token = token.strip("[]()<>,;\"'")
    if "/" in token:
        if not re.search(r"(^|/)bin/[^/]+$", token):
            return None
        token = token.rsplit("/", 1)[1]
    return token if token in PROGRAMS else None


def mentions(text):
    """(program, option tokens, bare words) for each program run in text, in order: a program name
    that opens the text or a command of it (after `;`, `&&`, `--`, `sudo`, `exec` or VAR=value),
    not one that is another command's argument (`kubectl scale statefulset cohort-worker`); options
    and words are those that follow it up to the next command. A `|` separates alternatives
    (`status JOB [--json] | list [--json]`), not commands."""
    out = []
    current = None
    command_start = True
    for token in re.split(r"\s+|\|+|(;|&&)", text):
        if not token:
            continue
        if token in (";", "&&"):
            command_start = True
            continue
        prog = program_of(token)
        if prog and command_start:
            current = (prog, [], [])
            out.append(current)
            command_start = False
            continue
        if command_start and (token in ("--", "sudo", "exec") or re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", token)):
            continue
        if command_start:
            current = None  # another command
        command_start = token == "--"
        if current is None:
            continue
        current[1].extend(OPTION.findall(token))
        if re.fullmatch(r"[a-z][a-z-]*", token):
            current[2].append(token)
    return out


def check_file(path, root, fields, free, top, helps, problems, counts):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(path, root)
    blocks, code = split_markdown(text)

    def check_options(number, prog, options, words):
        if not helps.available(prog):
            return
        accepted = helps.options(prog, words)
        for o in options:
            counts["options"] += 1
            if o not in accepted:
                problems.add(rel, number, prog + ": no option " + o + " in its --help")

    # Spec fields and program options in prose: code spans.
    for start, block in blocks:
        # The program named last in this block and the words after it (its subcommand), or None
        # after a script or another command.
        last = None
        for m in SPAN.finditer(block):
            span = m.group(1).replace("\n", " ")
            number = start + block.count("\n", 0, m.start())
            field = FIELD.match(span.strip())
            if field:
                counts["fields"] += 1
                reason = check_field(field.group(1), fields, free, top)
                if reason:
                    problems.add(rel, number, reason)
            found = mentions(span)
            for prog, options, words in found:
                check_options(number, prog, options, words)
                last = (prog, words)
            if found or not OPTION.search(span):
                if SCRIPT.search(span) and not found:
                    last = None
                continue
            # An option alone (`--connect-timeout`), or a subcommand with its options (`export CKPT
            # --hf OUT`): the program named last in the block, with its subcommand, should accept
            # it; prose often names an option of a program it does not name right there ("a head
            # that loses the leadership answers for `--step-down-grace` seconds"), so an option
            # some program accepts passes. A span that opens with another command (`kubectl apply
            # --dry-run`) is not checked.
            first = span.split()[0]
            if last is None or not (first.startswith("-") or helps.subcommands(last[0], [first])):
                last = None
                continue
            words = last[1] + [w for w in re.split(r"[\s|\[\]]+", span) if re.fullmatch(r"[a-z][a-z-]*", w)]
            if not helps.available(last[0]):
                continue
            accepted = helps.options(last[0], words) | helps.any_options()
            for o in OPTION.findall(span):
                counts["options"] += 1
                if o not in accepted:
                    problems.add(rel, number, last[0] + ": no option " + o + " in its --help (nor in any "
                                 "other program's)")
    # Program options in shell code blocks, line by line.
    for number, line in code:
        for prog, options, words in mentions(line):
            check_options(number, prog, options, words)
    # Scripts, anywhere.
    for number, line in enumerate(text.split("\n"), start=1):
        for m in SCRIPT.finditer(line):
            name = m.group(1).rstrip(".")
            counts["scripts"] += 1
            script = os.path.join(root, "scripts", name)
            if not os.path.isfile(script):
                problems.add(rel, number, "scripts/" + name + " does not exist")
            elif not os.access(script, os.X_OK):
                problems.add(rel, number, "scripts/" + name + " is not executable")


def check(bin_dir, root, quiet=False):
    fields, free = spec_fields(root)
    top = {f.split(".")[0] for f in fields}
    helps = Helps(bin_dir)
    problems = Problems()
    counts = {"fields": 0, "options": 0, "scripts": 0}
    for path in markdown_files(root):
        check_file(path, root, fields, free, top, helps, problems, counts)
    if not quiet:
        for path, line, message in problems.items:
            print(f"{path}:{line}: {message}")
        if problems.items:
            print(f"check_readme: {len(problems.items)} stale names in README.md and docs/*.md")
        else:
            print(f"check_readme: ok: {counts['fields']} spec fields, {counts['options']} program "
                  f"options and {counts['scripts']} script mentions in README.md and docs/*.md")
        for prog in sorted(helps.missing):
            print(f"check_readme: {prog} is not in {bin_dir}: its options were not checked")
    return problems.items


def self_test(bin_dir, root):
    """A copy of README.md and docs/ with one wrong name of each kind appended must fail on each."""
    wrong = ("\nStale names: `train.no_such_field`, `cluster-head --no-such-option DIR`,\n"
             "`submit run JOB.json --no-such-flag` and `scripts/no-such-script`.\n\n"
             "`cluster-worker` waits `--no-such-wait` seconds.\n\n"
             "```sh\nbuild/bin/cohort-ckpt export CKPT --no-such-export-option OUT\n```\n")
    expected = ["no field train.no_such_field", "cluster-head: no option --no-such-option",
                "submit: no option --no-such-flag", "scripts/no-such-script does not exist",
                "cluster-worker: no option --no-such-wait",
                "cohort-ckpt: no option --no-such-export-option"]
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(root, "README.md"), tmp)
        shutil.copytree(os.path.join(root, "docs"), os.path.join(tmp, "docs"))
        os.symlink(os.path.abspath(os.path.join(root, "scripts")), os.path.join(tmp, "scripts"))
        if check(bin_dir, tmp, quiet=True):
            print("check_readme --self-test: the unchanged copy does not pass; run the check itself")
            return 1
        with open(os.path.join(tmp, "README.md"), "a", encoding="utf-8") as f:
            f.write(wrong)
        found = [f"{p}:{l}: {m}" for p, l, m in check(bin_dir, tmp, quiet=True)]
    missed = [e for e in expected if not any(e in line for line in found)]
    for line in found:
        print(line)
    if missed or len(found) != len(expected):
        print("check_readme --self-test: FAIL: not reported: " + ", ".join(missed) if missed else
              f"check_readme --self-test: FAIL: {len(found)} reports for {len(expected)} wrong names")
        return 1
    print(f"check_readme --self-test: ok: each of the {len(expected)} wrong names was reported")
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "--self-test":
        return self_test(argv[2], argv[3])
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    return 1 if check(argv[1], argv[2]) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
