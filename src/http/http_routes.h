/*
 * http_routes.h
 *		libmicrohttpd's request callback: the token, the routes, the
 *		transaction each request runs in, and the answers' headers.
 */
#ifndef HTTP_ROUTES_H
#define HTTP_ROUTES_H

#include <microhttpd.h>

/* Once, before the daemon starts. */
extern void http_routes_init(void);

extern enum MHD_Result http_route_request(void *cls, struct MHD_Connection *connection,
										  const char *url, const char *method,
										  const char *version, const char *upload_data,
										  size_t *upload_data_size, void **request_state);

#endif							/* HTTP_ROUTES_H */
