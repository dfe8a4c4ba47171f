"""A script written for torch.distributed.launch: it requires its data path and the
--local_rank argument that launcher passed (torchrun sets LOCAL_RANK in the environment)."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--local_rank", type=int, required=True)
parser.parse_args()
