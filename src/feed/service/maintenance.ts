// The operator's tools (backup, restore, moving a database) reach the engine and the store
// through the service, as every binding does: the commands and the HTTP backup route import these.
export { BACKUP_TYPE, encodeBackup, restoreBackup } from '../engine/backup.ts';
export { migrateDatabase } from '../store/migrate.ts';
