-- Files every manager on the database serves: sessions' inputs, outputs and logs (scope
-- `sessions/<id>`) and agent builds (scope `agent-builds`). A file is its rows, each a piece of
-- it from byte `start`, so a log grows by a row and a read from an offset reads only the rows
-- past it.
CREATE TABLE files (
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    start INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (scope, name, start)
);
