"""Pages that fail in each way a page's process can (an exit, a signal, a timeout, too much
output, a block that is not one), with the line and the words each failure must be reported with:
the fault tests run them through each door, and the cluster tests on a cluster."""
from __future__ import annotations

PATH = "docs/fault.md"

FAULTS = {
    # body of the page (its first line is line 1), the line named, the words of the cause
    "sys.exit(0)": ("```python exec\nimport sys\nsys.exit(0)\n```\n", 3, "the block called exit(0)"),
    "exit()": ("```python exec\nx = 1\nexit()\n```\n", 3, "the block called exit(None)"),
    "os._exit(3)": ("```python exec\nimport os\nos._exit(3)\n```\n", 1,
                    "the page's process exited with status 3 while running this block"),
    "segfault": ("```python exec\nimport ctypes\nctypes.string_at(0)\n```\n", 3,
                 "the page's process was killed by signal 11 (SIGSEGV: Segmentation fault)"),
    "killed": ("```python exec\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n```\n", 1,
               "was killed by signal 9 (SIGKILL: Killed); if nothing else killed it, the machine ran out of memory"),
    "swallowed timeout": ("```python exec timeout=0.5\nimport time\nwhile True:\n    try:\n        time.sleep(0.05)\n"
                          "    except BaseException:\n        pass\n```\n", 5, "block timed out after 0.5 s"),
    "long C call": ("```python exec timeout=0.5\nimport hashlib\nhashlib.pbkdf2_hmac('sha256', b'x', b'y', 2**31 - 1)\n```\n",
                    3, "block timed out after 0.5 s"),
    "output cap": ("```python exec\nprint('x' * 3000)\n```\n", 2, "this block's output is larger than the limit of 2 KB"),
    "near-miss fence": ("Some text.\n\n```py exec\nprint('never run')\n```\n", 3, "looks like a block to run but is not one"),
    "slot markup in prose": ("```python exec\nprint(1)\n```\n\nSee `<div class=\"lessonlib-html-slot\">`.\n"
                             "<div class=\"lessonlib-html-slot\" data-slot=\"7-figure-0\"></div>\n", 6,
                             "the engine's own markup for block outputs"),
}
