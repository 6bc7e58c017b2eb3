/*
 * http_worker.c
 *		The HTTP background worker: binds mailer.http_address and
 *		mailer.http_port, and runs libmicrohttpd without threads of its own.
 *
 * libmicrohttpd runs in external-event mode with epoll: this loop waits on
 * a WaitEventSet holding the worker's latch, postmaster death and
 * libmicrohttpd's epoll descriptor, then lets libmicrohttpd do what is
 * ready.  Requests are therefore answered in this process's one thread,
 * where PostgreSQL's code (SPI, palloc, ereport) may run; http_routes.c
 * keeps errors from unwinding through libmicrohttpd.  The loop also takes
 * the one-second samples of the jobs' history.
 *
 * Design: docs/ARCHITECTURE.md, "The HTTP worker".
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/mailer.h"
#include "http/history_sampler.h"
#include "http/http_routes.h"
#include "http/http_worker.h"
#include "http/static_pages.h"

/*
 * Limits: a scraper or a browser needs little; a flood gets little.  One
 * address holds at most a few of the connections, so that a client that
 * opens many and sends slowly (slowloris) cannot shut out the others; the
 * whole stays well under the process's file descriptor limit (sockets
 * are not counted in max_files_per_process, which assumes 1024).
 */
#define HTTP_MAX_CONNECTIONS	128
#define HTTP_MAX_CONNECTIONS_PER_ADDRESS 64
#define HTTP_CONNECTION_TIMEOUT_S 10
#define HTTP_CONNECTION_MEMORY	(64 * 1024)	/* request line and headers: beyond, 431 */

/* The history's resolution, and so the longest wait of the loop. */
#define HTTP_SAMPLE_INTERVAL_MS 1000

typedef union HttpAddress
{
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
} HttpAddress;

/* libmicrohttpd's last complaint: why it could not start, when it could not. */
static char mhd_message[256];

static bool parse_address(const char *address, int port, HttpAddress *addr, bool *ipv6);
static struct MHD_Daemon *start_daemon(void);
static void log_mhd(void *cls, const char *fmt, va_list ap) pg_attribute_printf(2, 0);
static void serve(struct MHD_Daemon *daemon);
static size_t unescape_url(void *cls, struct MHD_Connection *connection, char *s);
static int	hex_value(char c);

bool
http_address_valid(const char *address)
{
	HttpAddress addr;
	bool		ipv6;

	return parse_address(address, 0, &addr, &ipv6);
}

/* "*" leaves addr unset: libmicrohttpd binds every address, IPv6 and IPv4. */
static bool
parse_address(const char *address, int port, HttpAddress *addr, bool *ipv6)
{
	memset(addr, 0, sizeof(*addr));
	*ipv6 = false;
	if (address == NULL)
		return false;
	if (strcmp(address, "*") == 0)
		return true;
	if (inet_pton(AF_INET, address, &addr->in4.sin_addr) == 1)
	{
		addr->in4.sin_family = AF_INET;
		addr->in4.sin_port = htons(port);
		return true;
	}
	if (inet_pton(AF_INET6, address, &addr->in6.sin6_addr) == 1)
	{
		addr->in6.sin6_family = AF_INET6;
		addr->in6.sin6_port = htons(port);
		*ipv6 = true;
		return true;
	}
	return false;
}

void
http_worker_main(Datum main_arg)
{
	struct MHD_Daemon *daemon;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	/* As the bootstrap superuser, like the launcher: it reads every job. */
	BackgroundWorkerInitializeConnection(mailer_database, NULL, 0);
	pgstat_report_appname("mailer http");

	/*
	 * Every request reads only, with qualified names, for a short while;
	 * times are rendered in UTC.
	 */
	SetConfigOption("default_transaction_read_only", "on", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "1s", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("TimeZone", "UTC", PGC_SUSET, PGC_S_OVERRIDE);

	static_pages_load();
	http_routes_init();
	daemon = start_daemon();
	ereport(LOG,
			(errmsg("mailer http worker listening on %s port %d",
					mailer_http_address, mailer_http_port)));
	serve(daemon);
	MHD_stop_daemon(daemon);

	/*
	 * Not 0: a background worker that exits with 0 is never started again,
	 * and a pg_terminate_backend must not end monitoring until the next
	 * server start.  At shutdown the postmaster restarts nothing anyway.
	 */
	proc_exit(1);
}

static struct MHD_Daemon *
start_daemon(void)
{
	HttpAddress addr;
	bool		ipv6;
	unsigned int flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	struct MHD_Daemon *daemon;

	if (!parse_address(mailer_http_address, mailer_http_port, &addr, &ipv6))
		ereport(FATAL,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("mailer.http_address \"%s\" is not an address", mailer_http_address),
				 errhint("Write for example 127.0.0.1, ::1, 0.0.0.0 or *.")));
	if (strcmp(mailer_http_address, "*") == 0)
		flags |= MHD_USE_DUAL_STACK;
	else if (ipv6)
		flags |= MHD_USE_IPv6;

	daemon = MHD_start_daemon(flags, (uint16_t) mailer_http_port, NULL, NULL,
							  http_route_request, NULL,
							  MHD_OPTION_EXTERNAL_LOGGER, log_mhd, NULL,
							  MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
							  MHD_OPTION_CONNECTION_LIMIT, (unsigned int) HTTP_MAX_CONNECTIONS,
							  MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int) HTTP_MAX_CONNECTIONS_PER_ADDRESS,
							  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) HTTP_CONNECTION_TIMEOUT_S,
							  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) HTTP_CONNECTION_MEMORY,
							  /* none: the port on every address */
							  MHD_OPTION_SOCK_ADDR, addr.sa.sa_family != 0 ? &addr.sa : NULL,
							  MHD_OPTION_END);

	/* The postmaster starts the worker again in a few seconds. */
	if (daemon == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("mailer http worker could not listen on %s port %d",
						mailer_http_address, mailer_http_port),
				 mhd_message[0] ? errdetail("libmicrohttpd: %s", mhd_message) : 0,
				 errhint("Another process may use the port: set mailer.http_port to a free one, or 0 for no HTTP worker.")));
	return daemon;
}

/*
 * libmicrohttpd's own complaints (a refused connection, a bad request): at
 * DEBUG1, as a client could otherwise fill the server log with them; the
 * client has its 4xx.  The worker reports its own failures itself.
 */
static void
log_mhd(void *cls, const char *fmt, va_list ap)
{
	char		msg[512];
	size_t		len;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	len = strlen(msg);
	while (len > 0 && msg[len - 1] == '\n')
		msg[--len] = '\0';
	strlcpy(mhd_message, msg, sizeof(mhd_message));
	/* Inside libmicrohttpd: a pending cancel must not turn the report into an error. */
	HOLD_INTERRUPTS();
	ereport(DEBUG1, (errmsg_internal("mailer http: %s", msg)));
	RESUME_INTERRUPTS();
}

/*
 * %HH decoded as libmicrohttpd would, except %00: the routes read the path
 * as a C string, where a NUL would cut "/api/jobs/a%00b" to job "a" (and a
 * name never holds a NUL, so the path stays one that matches nothing).
 */
static size_t
unescape_url(void *cls, struct MHD_Connection *connection, char *s)
{
	char	   *in = s;
	char	   *out = s;

	while (*in)
	{
		int			hi,
					lo;

		if (in[0] == '%' && (hi = hex_value(in[1])) >= 0 && (lo = hex_value(in[2])) >= 0 &&
			(hi | lo) != 0)
		{
			*out++ = (char) (hi * 16 + lo);
			in += 3;
		}
		else
			*out++ = *in++;
	}
	*out = '\0';
	return out - s;
}

/* The loop: until SIGTERM, or the postmaster's death (which exits at once). */
static void
serve(struct MHD_Daemon *daemon)
{
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
	WaitEventSet *events = CreateWaitEventSet(TopMemoryContext, 3);
	TimestampTz next_sample = GetCurrentTimestamp();

	if (info == NULL)
		ereport(FATAL,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("mailer http worker: libmicrohttpd has no epoll descriptor"),
				 errhint("Install a libmicrohttpd built with epoll (Debian's is).")));
	AddWaitEventToSet(events, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(events, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(events, WL_SOCKET_READABLE, info->epoll_fd, NULL, NULL);

	for (;;)
	{
		WaitEvent	event;
		TimestampTz now;
		long		timeout_ms;
		MHD_UNSIGNED_LONG_LONG mhd_timeout;

		/*
		 * No statement runs here: a cancel (pg_cancel_backend, or a
		 * statement timeout that fired as a request ended) has nothing to
		 * cancel, and outside a transaction it would end the worker.
		 */
		QueryCancelPending = false;
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			return;
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		now = GetCurrentTimestamp();
		if (now >= next_sample)
		{
			history_sampler_tick(now);
			next_sample = now + HTTP_SAMPLE_INTERVAL_MS * INT64CONST(1000);
		}
		timeout_ms = (long) ((next_sample - now + 999) / 1000);
		if (MHD_get_timeout(daemon, &mhd_timeout) == MHD_YES && mhd_timeout < (MHD_UNSIGNED_LONG_LONG) timeout_ms)
			timeout_ms = (long) mhd_timeout;

		if (WaitEventSetWait(events, timeout_ms, &event, 1, PG_WAIT_EXTENSION) > 0 &&
			(event.events & WL_LATCH_SET))
			ResetLatch(MyLatch);

		/* Whatever woke us: libmicrohttpd never blocks here. */
		MHD_run(daemon);
	}
}

/* A hexadecimal digit's value, or -1. */
static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}
