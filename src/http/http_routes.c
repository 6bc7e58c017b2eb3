/*
 * http_routes.c
 *		What the HTTP worker answers: routing, the bearer token, the
 *		answers' headers.
 *
 * libmicrohttpd calls http_route_request from MHD_run, in the worker's
 * thread, with its own frames on the stack below: a handler that reads
 * jobs runs through http_xact_run, which keeps its errors from unwinding
 * through them; an error is answered 500.
 *
 * Design: docs/ARCHITECTURE.md, "The HTTP worker".
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/json.h"
#include "utils/memutils.h"

#include "base/mailer.h"
#include "http/api_json.h"
#include "http/http_routes.h"
#include "http/http_xact.h"
#include "http/prometheus.h"
#include "http/static_pages.h"

#define CONTENT_TYPE_JSON		"application/json"
#define CONTENT_TYPE_METRICS	"text/plain; version=0.0.4; charset=utf-8"
#define API_JOBS_PATH			"/api/jobs"

/*
 * A handler writes its answer's body into out and returns the HTTP status;
 * it runs in a read-only transaction with a snapshot, and may raise errors.
 */
typedef int (*HttpHandler) (const char *arg, StringInfo out);

/* A request for a handler, and its answer. */
typedef struct HttpRequest
{
	HttpHandler handler;
	const char *arg;
	StringInfoData body;
	int			status;
} HttpRequest;

/* What one request allocates; emptied after each. */
static MemoryContext request_context;

static int	handle_metrics(const char *arg, StringInfo out);
static int	handle_jobs(const char *arg, StringInfo out);
static int	handle_job(const char *arg, StringInfo out);
static void run_request(void *arg);
static bool authorized(struct MHD_Connection *connection);
static bool has_body(struct MHD_Connection *connection);
static bool token_equal(const char *given, const char *token);
static enum MHD_Result answer(struct MHD_Connection *connection, int status,
							  const char *content_type, const char *body, size_t length,
							  enum MHD_ResponseMemoryMode mode, const char *header, const char *value);
static enum MHD_Result answer_error(struct MHD_Connection *connection, int status, const char *message,
									const char *header, const char *value);

void
http_routes_init(void)
{
	request_context = AllocSetContextCreate(TopMemoryContext, "mailer http request",
											ALLOCSET_DEFAULT_SIZES);
}

enum MHD_Result
http_route_request(void *cls, struct MHD_Connection *connection, const char *url,
				   const char *method, const char *version, const char *upload_data,
				   size_t *upload_data_size, void **request_state)
{
	HttpRequest request = {0};
	const char *content_type = CONTENT_TYPE_JSON;
	const StaticPage *page;
	const char *route;
	enum MHD_Result result;

	/*
	 * libmicrohttpd calls once when the headers are in, and again when the
	 * request is read.  Answering only then keeps the connection open for
	 * the client's next request; what is refused is refused at once, and
	 * the connection closed, without reading a body.
	 */
	if (*request_state == NULL)
	{
		/*
		 * The page's own files hold no data, and a browser opening the page
		 * cannot send a header: its script sends the token (from #token=).
		 */
		if (static_pages_find(url) == NULL && !authorized(connection))
			return answer_error(connection, MHD_HTTP_UNAUTHORIZED, "a valid bearer token is required",
								MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
		if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
			return answer_error(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are allowed",
								MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
		if (has_body(connection))
			return answer_error(connection, MHD_HTTP_CONTENT_TOO_LARGE, "a request has no body here",
								NULL, NULL);
		*request_state = &request_context;
		return MHD_YES;
	}
	/* (None was announced: whatever comes is dropped.) */
	if (*upload_data_size > 0)
	{
		*upload_data_size = 0;
		return MHD_YES;
	}

	/* The route, not the URL, names the request in pg_stat_activity and the log: the URL is the client's bytes. */
	if (strcmp(url, "/metrics") == 0)
	{
		route = "GET /metrics";
		request.handler = handle_metrics;
		content_type = CONTENT_TYPE_METRICS;
	}
	else if (strcmp(url, API_JOBS_PATH) == 0)
	{
		route = "GET " API_JOBS_PATH;
		request.handler = handle_jobs;
	}
	else if (strncmp(url, API_JOBS_PATH "/", strlen(API_JOBS_PATH "/")) == 0 &&
			 url[strlen(API_JOBS_PATH "/")] != '\0')
	{
		route = "GET " API_JOBS_PATH "/<name>";
		request.handler = handle_job;
		request.arg = url + strlen(API_JOBS_PATH "/");
	}
	else if ((page = static_pages_find(url)) != NULL)
	{
		if (page->body == NULL)
			return answer_error(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error", NULL, NULL);
		return answer(connection, MHD_HTTP_OK, page->content_type, page->body, page->length,
					  MHD_RESPMEM_PERSISTENT, NULL, NULL);
	}
	else
		return answer_error(connection, MHD_HTTP_NOT_FOUND, "no such path", NULL, NULL);

	MemoryContextSwitchTo(request_context);
	initStringInfo(&request.body);
	if (http_xact_run(run_request, &request, route))
		result = answer(connection, request.status, content_type, request.body.data,
						request.body.len, MHD_RESPMEM_MUST_COPY, NULL, NULL);
	else
		result = answer_error(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error",
							  NULL, NULL);
	MemoryContextSwitchTo(TopMemoryContext);
	MemoryContextReset(request_context);
	return result;
}

static void
run_request(void *arg)
{
	HttpRequest *request = arg;

	request->status = request->handler(request->arg, &request->body);
}

static int
handle_metrics(const char *arg, StringInfo out)
{
	prometheus_render(out);
	return MHD_HTTP_OK;
}

static int
handle_jobs(const char *arg, StringInfo out)
{
	api_json_jobs(out);
	return MHD_HTTP_OK;
}

static int
handle_job(const char *arg, StringInfo out)
{
	if (api_json_job(arg, out))
		return MHD_HTTP_OK;
	/* The name is not echoed: it is whatever bytes the client sent. */
	resetStringInfo(out);
	appendStringInfoString(out, "{\"error\": \"no job of that name\"}");
	return MHD_HTTP_NOT_FOUND;
}

/* Without a token set, everyone; with one, "Authorization: Bearer <token>". */
static bool
authorized(struct MHD_Connection *connection)
{
	const char *given;

	if (mailer_http_token == NULL || mailer_http_token[0] == '\0')
		return true;
	given = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (given == NULL || pg_strncasecmp(given, "Bearer ", 7) != 0)
		return false;
	given += 7;
	while (*given == ' ')
		given++;
	return token_equal(given, mailer_http_token);
}

/* A body announced: by its length (but 0), or chunked. */
static bool
has_body(struct MHD_Connection *connection)
{
	const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
													 MHD_HTTP_HEADER_CONTENT_LENGTH);

	return (length != NULL && strcmp(length, "0") != 0) ||
		MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
									MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

/*
 * In a time that depends on the token's length only, not on where a guess
 * first differs.
 */
static bool
token_equal(const char *given, const char *token)
{
	size_t		given_len = strlen(given);
	size_t		token_len = strlen(token);
	unsigned char diff = given_len != token_len;

	for (size_t i = 0; i < token_len; i++)
		diff |= (unsigned char) token[i] ^ (unsigned char) (i < given_len ? given[i] : 0);
	return diff == 0;
}

/* Queue an answer with the headers every answer has, plus one more if given. */
static enum MHD_Result
answer(struct MHD_Connection *connection, int status, const char *content_type,
	   const char *body, size_t length, enum MHD_ResponseMemoryMode mode,
	   const char *header, const char *value)
{
	struct MHD_Response *response;
	enum MHD_Result result;

	response = MHD_create_response_from_buffer(length, (void *) body, mode);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	MHD_add_response_header(response, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
	if (strncmp(content_type, "text/html", 9) == 0)
		MHD_add_response_header(response, "Content-Security-Policy", "default-src 'self'");
	if (header != NULL)
		MHD_add_response_header(response, header, value);
	result = MHD_queue_response(connection, status, response);
	MHD_destroy_response(response);
	return result;
}

/* {"error": message}; the messages are the routes' own, never a client's text. */
static enum MHD_Result
answer_error(struct MHD_Connection *connection, int status, const char *message,
			 const char *header, const char *value)
{
	char		body[256];

	snprintf(body, sizeof(body), "{\"error\": \"%s\"}", message);
	return answer(connection, status, CONTENT_TYPE_JSON, body, strlen(body),
				  MHD_RESPMEM_MUST_COPY, header, value);
}
