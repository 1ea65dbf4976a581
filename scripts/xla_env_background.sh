# source scripts/xla_env_background.sh: start building the torch-xla environment
# (scripts/setup_xla_env.sh: ~4 GB download once per machine, seconds once cached) in the
# background at nice 19, so that it takes no core from a test worker, unless ANB_SKIP_XLA=1 or
# a caller started it already (ANB_XLA_SETUP_STATUS set). Its exit status goes to
# build/setup_xla.status, which tests/test_xla_env.py waits for; its seconds to
# build/setup_xla.phase. .ci/run starts it before the set-up (which is mostly one process of
# downloads and unpacking), test.sh otherwise.
if [ "${ANB_SKIP_XLA:-0}" != 1 ] && [ -z "${ANB_XLA_SETUP_STATUS:-}" ]; then
  mkdir -p build
  export ANB_XLA_SETUP_STATUS="$PWD/build/setup_xla.status"
  rm -f "$ANB_XLA_SETUP_STATUS" build/setup_xla.phase
  ( status=0
    nice -n 19 bash scripts/timed.sh build/setup_xla.phase setup_xla_env \
      bash scripts/setup_xla_env.sh > build/setup_xla.log 2>&1 || status=$?
    echo "$status" > "$ANB_XLA_SETUP_STATUS.tmp" && mv "$ANB_XLA_SETUP_STATUS.tmp" "$ANB_XLA_SETUP_STATUS"
  ) &
fi
