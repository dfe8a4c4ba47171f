"""A script written for torch.distributed.launch: it requires its data path and the
--local_rank argument that launcher passed (torchrun sets LOCAL_RANK in the environment). Given
--data with no such file, it says so on stderr and exits with status 3, as scripts do."""
import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--local_rank", type=int, required=True)
args = parser.parse_args()
if not os.path.exists(args.data):
    print(f"starting rank {args.local_rank}", file=sys.stderr)
    print(f"{args.data}: no such data set", file=sys.stderr)
    sys.exit(3)
