// The comparison table of runs: one row per run with what its summary says (wall time,
// throughput, stall and off-CPU shares, staleness, losses, memory, recompute), for the
// Compare Runs dialog and to paste into notes and slides as CSV or Markdown.
#pragma once

#include "rundata.h"

#include <QList>
#include <QString>
#include <QStringList>

#include <vector>

namespace syncopate {

struct ComparisonTable {
    QStringList header;
    QList<QStringList> rows; // as shown: numbers formatted, "" where a run has no such figure
    QStringList tips;        // per column, what the figure means

    QString toCsv() const;      // RFC 4180 quoting
    QString toMarkdown() const; // a GitHub table, pipes escaped
};

ComparisonTable compareRuns(const std::vector<RunDataPtr> &runs);

} // namespace syncopate
