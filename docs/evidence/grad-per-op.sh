#!/bin/bash
# usage: grad-per-op.sh <test-backend-ops binary>  -> one line per op: OP rc nOK nFAIL
BIN=$1
for op in $($BIN --list-ops 2>&1 | sed -n 's/^  \([A-Z0-9_]*\)$/\1/p'); do
    out=$(timeout 120 $BIN grad -o "$op" 2>&1); rc=$?
    nok=$(printf '%s\n' "$out" | grep -ac 'OK')
    nfail=$(printf '%s\n' "$out" | grep -ac 'FAIL')
    echo "$op rc=$rc ok=$nok fail=$nfail"
done
