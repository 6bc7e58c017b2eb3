/*
 * kafka_client.c
 *		Secrets and logs of a librdkafka handle (kafka_client.h).
 */
#include "postgres.h"

#include "nodes/parsenodes.h"
#include "utils/memutils.h"

#include "base/mailer.h"
#include "base/signals.h"
#include "connectors/kafka_client.h"
#include "plan/spec.h"

static void
add_secret(KafkaSecrets *secrets, char *text)
{
	if (secrets->n == secrets->capacity)
	{
		secrets->capacity = Max(8, secrets->capacity * 2);
		secrets->texts = secrets->texts ?
			repalloc(secrets->texts, sizeof(char *) * secrets->capacity) :
			MemoryContextAlloc(TopMemoryContext, sizeof(char *) * secrets->capacity);
	}
	secrets->texts[secrets->n++] = MemoryContextStrdup(TopMemoryContext, text);
}

/*
 * librdkafka's texts may quote an option's value (an unparsable
 * sasl.oauthbearer.config): mask every secret value, and each of its words
 * of 4 characters or more, wherever it appears.
 */
void
kafka_secrets_collect(KafkaSecrets *secrets, List *options)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);
		char	   *value = strVal(opt->arg);
		char	   *words;
		char	   *word;
		char	   *save;

		if (!spec_option_is_secret(opt->defname) || value[0] == '\0')
			continue;
		add_secret(secrets, value);
		words = pstrdup(value);
		for (word = strtok_r(words, " \t\n\r,;", &save); word; word = strtok_r(NULL, " \t\n\r,;", &save))
		{
			char	   *eq = strchr(word, '=');

			if (strlen(word) >= 4 && strcmp(word, value) != 0)
			{
				add_secret(secrets, word);
				if (eq && strlen(eq + 1) >= 4)
					add_secret(secrets, eq + 1);
			}
		}
		pfree(words);
	}
}

/*
 * The longest secret first, wherever one starts; the result is cut to 1023
 * bytes after masking.
 */
void
kafka_secrets_mask(const KafkaSecrets *secrets, char *text, size_t size)
{
	char		out[1024];
	size_t		o = 0;
	const char *p = text;

	if (secrets->n == 0)
		return;
	while (*p && o < sizeof(out) - 1)
	{
		size_t		match = 0;

		for (int i = 0; i < secrets->n; i++)
		{
			size_t		len = strlen(secrets->texts[i]);

			if (len > match && strncmp(p, secrets->texts[i], len) == 0)
				match = len;
		}
		if (match > 0)
		{
			size_t		n = Min(strlen(SPEC_SECRET_MASK), sizeof(out) - 1 - o);

			memcpy(out + o, SPEC_SECRET_MASK, n);
			o += n;
			p += match;
		}
		else
			out[o++] = *p++;
	}
	out[o] = '\0';
	strlcpy(text, out, size);
}

void
kafka_drain_logs(rd_kafka_queue_t *logs, const KafkaSecrets *secrets)
{
	rd_kafka_event_t *ev;

	while ((ev = rd_kafka_queue_poll(logs, 0)) != NULL)
	{
		const char *fac;
		const char *str;
		int			level;

		if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_LOG &&
			rd_kafka_event_log(ev, &fac, &str, &level) == 0)
		{
			/* Masked whole, then cut: a secret across the cut stays hidden. */
			char	   *line = pstrdup(str);

			kafka_secrets_mask(secrets, line, strlen(line) + 1);
			ereport(level <= 4 ? LOG : DEBUG1,
					(errmsg_internal("librdkafka %s: %s", fac, line)));
			pfree(line);
		}
		rd_kafka_event_destroy(ev);
	}
}

rd_kafka_t *
kafka_client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *errstr, size_t errstr_size)
{
	sigset_t	saved;
	rd_kafka_t *rk;

	mailer_block_signals(&saved);
	rk = rd_kafka_new(type, conf, errstr, errstr_size);
	mailer_restore_signals(&saved);
	return rk;
}

TimestampTz
kafka_timestamp(int64 ms)
{
	TimestampTz t;

	if (ms < 0 || ms > PG_INT64_MAX / 1000)
		return DT_NOBEGIN;
	t = ms * 1000 - UNIX_OFFSET_US;
	return IS_VALID_TIMESTAMP(t) ? t : DT_NOBEGIN;
}
