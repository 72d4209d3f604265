# Source on the GPU machine after benchmarks/gpu_install.sh: `. benchmarks/gpu_env.sh`.
# PYTHONPATH gets /tmp/site and what its .pth files add: Python reads .pth files only in site directories,
# never on PYTHONPATH, and the CuTe DSL (quack) puts its `cutlass` package on sys.path through one.
PYTHONPATH=$(python3 -c "
import site, sys
before = set(sys.path)
site.addsitedir('/tmp/site')
print(':'.join(['/tmp/site'] + [p for p in sys.path if p not in before and p != '/tmp/site']))
"):$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
