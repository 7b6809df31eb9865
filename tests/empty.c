/* empty.c: keeps the test support library non-empty. */
