-- What customers call a whole article ("return policy" for "7-day no-reason returns"), from its front matter's
-- `keywords` (an HTML page's <meta name="keywords">, an FAQ table's keywords column), one per line; indexed with
-- the title, and compared with the question as the title is (README, Knowledge base).
ALTER TABLE kb_chunks ADD COLUMN keywords text NOT NULL DEFAULT '';
