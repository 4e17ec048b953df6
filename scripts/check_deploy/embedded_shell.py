"""shellcheck on shell scripts embedded in templates (CloudFormation user data
in Fn::Sub, Terraform startup scripts): the template's own interpolations are
replaced by a plain word first, so shellcheck sees the script the machine will
run, and its findings point at the template's lines."""

import re
import subprocess


def is_script(text):
    return isinstance(text, str) and text.startswith("#!") and "sh" in text.split("\n", 1)[0]


def check(path, text, first_line, place, report):
    """first_line: the template line holding the script's first line (0: unknown)."""
    # The template's values became ${TPL_...} variables: assign them on one
    # added line, so a shell variable used but never set is still found
    # (SC2154); they keep their ${} inside $(( )) (SC2004).
    head, _, rest = text.partition("\n")
    names = sorted(set(re.findall(r"\$\{(TPL_\w+)\}", rest)))
    assign = "; ".join(f"{n}=x" for n in names) or ":"
    text = head + "\n" + assign + "\n" + rest
    r = subprocess.run(["shellcheck", "-s", "bash", "-e", "SC2004", "-f", "gcc", "-"], input=text, capture_output=True, text=True)
    for msg in r.stdout.splitlines():
        m = re.match(r"-:(\d+):\d+: (.*)", msg)
        if not m:
            continue
        n = int(m.group(1))
        n = n - 1 if n > 2 else n
        line = first_line + n - 1 if first_line else 0
        report.error(path, line, f"{place} (embedded script, shellcheck)", m.group(2))


def cfn_sub_to_shell(text):
    """${Name}/${Res.Attr} -> ${TPL_Name}, a variable; ${!Literal} -> ${Literal}, as CloudFormation renders them."""
    text = re.sub(r"\$\{!", "\x00", text)
    text = re.sub(r"\$\{([^}]*)\}", lambda m: "${TPL_" + re.sub(r"\W", "_", m.group(1)) + "}", text)
    return text.replace("\x00", "${")


def tf_template_to_shell(text):
    """${expr} -> ${TPL_VALUE}, a variable; $${ -> ${ and %%{ -> %{, as Terraform renders them."""
    text = text.replace("$${", "\x00").replace("%%{", "\x01")
    text = re.sub(r"\$\{[^}]*\}", "${TPL_VALUE}", text)
    return text.replace("\x00", "${").replace("\x01", "%{")


def line_of_script(file_text, script_first_line, after_line):
    """The 1-based line of the file where a script whose first line is given starts, at or after a line."""
    lines = file_text.split("\n")
    for i in range(max(0, after_line - 1), len(lines)):
        if lines[i].strip() == script_first_line.strip():
            return i + 1
    return 0
