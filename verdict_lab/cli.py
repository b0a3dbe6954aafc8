"""The argument parser of the folder's commands: a bad flag is one line on stderr and exit code 2,
and a flag must be spelled out (argparse would read --seed as --seeds)."""

import argparse


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")
