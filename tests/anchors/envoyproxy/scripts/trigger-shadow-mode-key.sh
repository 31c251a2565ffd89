#!/bin/bash
# Copied unchanged (below this header) from envoyproxy/ratelimit,
# integration-test/scripts/trigger-shadow-mode-key.sh at commit f2fb157.
# Copyright the envoyproxy/ratelimit authors. Licensed under the Apache
# License, Version 2.0: see ../LICENSE.  Replayed by
# tests/integration/test_rls_envoyproxy.py (Envoy's routes as descriptors).

#
# descriptor: (foo: *), (baz: shady)
# Has rate limit quota 3 req / min
# shadow_mode is true
#

response=$(curl -f -s -H "foo: pelle" -H "baz: shady" http://envoy-proxy:8888/twoheader)
response=$(curl -f -s -H "foo: pelle" -H "baz: shady" http://envoy-proxy:8888/twoheader)
response=$(curl -f -s -H "foo: pelle" -H "baz: shady" http://envoy-proxy:8888/twoheader)
response=$(curl -f -s -H "foo: pelle" -H "baz: shady" http://envoy-proxy:8888/twoheader)
response=$(curl -f -s -H "foo: pelle" -H "baz: shady" http://envoy-proxy:8888/twoheader)

if [ $? -ne 0 ]; then
	echo "Shadow Mode key should not trigger an error, even if we have exceeded the quota"
	exit 1
fi

remaining=$(curl -i -s -H "foo: pelle" -H "baz: shady" http://envoy-proxy:8888/twoheader | grep x-ratelimit-remaining | cut -d: -f2 | cut -d: -f2 | sed 's/ //g')

if [ $remaining == "0" ]; then
	echo "Remaining should be zero"
	exit 1
fi
