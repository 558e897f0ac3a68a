# What CPython itself says about the lines of a few functions, for the line-table decoder test:
# per function "minor firstlineno table_hex", then "start end line" per co_lines() range (byte
# offsets; line -1 where there is none), then "end".
import sys


def simple(a):
    b = a + 1
    return b


def branches(x):
    if x > 3:
        y = [i * 2 for i in range(x)]
    else:
        y = None

    try:
        z = 1 / x
    except ZeroDivisionError:
        z = 0
    return y, z


generated = {}
exec(compile("def far_apart():\n    total = 0\n" +
             "".join(f"    total += {i}\n" + "\n" * (i % 7) for i in range(60)) +
             "    return total\n", "<generated>", "exec"), generated)

for fn in (simple, branches, generated["far_apart"]):
    code = fn.__code__
    print(sys.version_info.minor, code.co_firstlineno, code.co_linetable.hex())
    for start, end, line in code.co_lines():
        print(start, end, -1 if line is None else line)
    print("end")
