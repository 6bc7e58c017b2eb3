-- Generated regression inputs for the fuzz harness, too large to keep as
-- corpus files; replayed by run.sh.  Each row printed is a mismatch.
SELECT 'regress.sql: ' || d FROM (VALUES
	-- nesting deeper than the scanner goes: PostgreSQL's parser decides
	('{"a": 1, "k": ' || repeat('[', 5000) || repeat(']', 5000) || '}'),
	('{"a": 1, "k": ' || repeat('[', 20000) || repeat(']', 20000) || '}'),
	('{"a": 1, "k": ' || repeat('[', 60000) || repeat(']', 60000) || '}'),
	('{"a": 1, "k": ' || repeat('{"a":', 5000) || '0' || repeat('}', 5000) || '}'),
	('{"a": 1, "k": ' || repeat('{"a":', 10000) || '0' || repeat('}', 10000) || '}'),
	('{"a": 1, "k": ' || repeat('{"a":', 20000) || '0' || repeat('}', 20000) || '}'),
	('{"a": 1, "k": ' || repeat('{"a":', 40000) || '0' || repeat('}', 40000) || '}'),
	('{"a": 1, "k": ' || repeat('[', 200000)),
	(repeat('[', 129) || repeat(']', 129)),
	('{"a": ' || repeat('[', 127) || repeat(']', 127) || '}'),
	('{"a": ' || repeat('[', 128) || repeat(']', 128) || '}'),
	('{"a": ' || repeat('[', 129) || repeat(']', 129) || ', "a": 5}'),
	-- numbers beyond numeric's weight and scale, without an exponent
	('{"x": 1' || repeat('0', 131072) || ', "a": 1}'),
	('{"x": 1' || repeat('0', 131071) || ', "a": 1}'),
	('{"x": 0.' || repeat('0', 16383) || '1, "a": 1}'),
	('{"x": 0.' || repeat('0', 16382) || '1, "a": 1}'),
	('{"a": 0.' || repeat('5', 16384) || '}'),
	('{"a": 1' || repeat('0', 131072) || '}')
) v(input), LATERAL (SELECT fuzz_json_check(convert_to(input, 'UTF8'))) c(d) WHERE d IS NOT NULL;
