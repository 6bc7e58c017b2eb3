/*
 * pulsar_options.c
 *		Which options a Pulsar source or sink takes (pulsar_options.h),
 *		with the same discipline as a Kafka source's librdkafka properties
 *		(kafka_options.c).
 *
 * Three options, closed list: a JWT ("auth.token", a secret: masked in the
 * stored spec, describe_job and errors), and for an https:// service URL
 * the CA certificate that signs the broker's, inline ("tls.ca.pem", any
 * role) or as a server file ("tls.ca.location", read as the database
 * server's OS user, so it needs pg_read_server_files, as Kafka's
 * ssl.ca.location does).  The broker's certificate and host name are
 * always verified: no option turns that off, for any role, since the
 * token would go to whoever answers (docs/ARCHITECTURE.md, "Pulsar
 * security").
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"

#include "plan/pulsar_options.h"
#include "plan/spec_error.h"

/*
 * A token goes into the upgrade request's and every admin request's
 * headers: visible ASCII only (a JWT is base64url and dots), so that it
 * cannot end a header and start another, and small enough for the
 * WebSocket transport's request buffer (connectors/pulsar_ws.c).
 */
#define TOKEN_MAX_BYTES 8192
#define CA_PEM_MAX_BYTES (1024 * 1024)

#define OPTIONS_HINT "A Pulsar source or sink takes \"auth.token\" (a JWT), and with an https:// service_url \"tls.ca.pem\" (the CA certificate, PEM) or \"tls.ca.location\" (a server file); the broker's certificate is always verified."

static void check_token(const char *path, const char *value);

const char *
pulsar_option(List *options, const char *name)
{
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);

		if (strcmp(opt->defname, name) == 0)
			return strVal(opt->arg);
	}
	return NULL;
}

void
pulsar_check_options(const char *path, const char *service_url, List *options, Oid owner)
{
	bool		https = strncmp(service_url, "https://", 8) == 0;
	ListCell   *lc;

	foreach(lc, options)
	{
		DefElem    *opt = lfirst(lc);
		const char *name = opt->defname;
		const char *value = strVal(opt->arg);
		char	   *opt_path = psprintf("%s.options.%s", path, name);

		if (strcmp(name, PULSAR_OPTION_TOKEN) == 0)
			check_token(opt_path, value);
		else if (strcmp(name, PULSAR_OPTION_CA_PEM) == 0 || strcmp(name, PULSAR_OPTION_CA_FILE) == 0)
		{
			if (!https)
				spec_error(opt_path, ERRCODE_INVALID_PARAMETER_VALUE,
						   "Give an https:// service_url, or leave the option out.",
						   "a CA certificate applies to an https:// service_url only");
			if (strcmp(name, PULSAR_OPTION_CA_FILE) == 0 &&
				pulsar_option(options, PULSAR_OPTION_CA_PEM) != NULL)
				spec_error(opt_path, ERRCODE_INVALID_PARAMETER_VALUE,
						   "Give the CA certificate once: either \"tls.ca.pem\" or \"tls.ca.location\".",
						   "\"tls.ca.pem\" and \"tls.ca.location\" are exclusive");
			if (strcmp(name, PULSAR_OPTION_CA_PEM) == 0 &&
				(strstr(value, "-----BEGIN CERTIFICATE-----") == NULL || strlen(value) > CA_PEM_MAX_BYTES))
				spec_error(opt_path, ERRCODE_INVALID_PARAMETER_VALUE,
						   "The CA certificate in PEM, from \"-----BEGIN CERTIFICATE-----\" to \"-----END CERTIFICATE-----\", at most 1 MB.",
						   "not a PEM certificate");
			if (strcmp(name, PULSAR_OPTION_CA_FILE) == 0 && value[0] != '/')
				spec_error(opt_path, ERRCODE_INVALID_PARAMETER_VALUE,
						   "An absolute path to a PEM file on the database server.",
						   "\"%s\" is not an absolute path", value);
			/* The worker reads it as the server's OS user. */
			if (strcmp(name, PULSAR_OPTION_CA_FILE) == 0 && !superuser_arg(owner) &&
				!has_privs_of_role(owner, ROLE_PG_READ_SERVER_FILES))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("permission denied to set %s", opt_path),
						 errdetail("It names a file that the job's worker reads as the database server's operating system user."),
						 errhint("Give the certificate inline in \"tls.ca.pem\", or grant pg_read_server_files to the job's owner.")));
		}
		else
			spec_error(opt_path, ERRCODE_INVALID_PARAMETER_VALUE, OPTIONS_HINT,
					   strncmp(name, "tls.", 4) == 0 ?
					   "not a Pulsar option: only the CA can be given, and certificate verification cannot be turned off" :
					   "not a Pulsar option");
	}
}

/* The value is never shown: it is a secret. */
static void
check_token(const char *path, const char *value)
{
	size_t		len = strlen(value);

	for (size_t i = 0; i < len; i++)
		if (value[i] <= ' ' || value[i] > '~')
			spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE,
					   "A JWT, as the broker's token authentication takes it (letters, digits, '-', '_' and '.'), without \"Bearer \"; the value is not shown.",
					   "a token is visible ASCII characters without spaces");
	if (len == 0 || len > TOKEN_MAX_BYTES)
		spec_error(path, ERRCODE_INVALID_PARAMETER_VALUE,
				   "A JWT of 1 to " CppAsString2(TOKEN_MAX_BYTES) " bytes; the value is not shown.",
				   "a token of %zu bytes", len);
}
