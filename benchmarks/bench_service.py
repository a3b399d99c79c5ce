"""The idioms services write, akresil vs aiokafka vs confluent-kafka in one run (same as ``akresil bench service``).

    python benchmarks/bench_service.py [--rounds 5] [--quick] [--out FILE]

See ``akresil/bench/service.py`` for what each idiom measures. Prints one JSON document (medians and worst rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import orjson

from akresil.bench.service import __doc__ as service_doc, add_arguments, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=service_doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    doc = asyncio.run(main(parser.parse_args(), progress=lambda line: print(line, file=sys.stderr)))
    sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
